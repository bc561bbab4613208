//! The connection to an envd: URL, token, user and headers, over gRPC (h2c) or gRPC-Web (HTTP/1.1, TLS).
