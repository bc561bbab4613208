#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

mod error;
mod local_io;
mod range;
mod types;
mod watch;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use e2b_envd_client::{CallOptions, EnvdConnection, Feature};
use e2b_envd_proto::filesystem as pb;
use e2b_envd_proto::wire::{FileOperation, file_signature, files_query};
use futures::{StreamExt as _, TryStreamExt as _};

pub use error::{FilesystemError, Result};
pub use range::RangeRead;
pub use types::{
    ByteStream, EntryInfo, EventType, FileType, FilesystemEvent, UrlOptions, WatchOptions,
    WriteData, WriteEntry, WriteInfo, WriteOptions,
};
pub use watch::WatchHandle;

/// File operations in one sandbox. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Filesystem {
    conn: EnvdConnection,
    user: Option<String>,
}

impl Filesystem {
    /// File operations over `conn`, as the connection's user (or envd's default user).
    pub fn new(conn: EnvdConnection) -> Self {
        Self { conn, user: None }
    }

    /// The same filesystem, with every call running as `user` (files created are owned by it).
    pub fn with_user(&self, user: impl Into<String>) -> Self {
        Self {
            conn: self.conn.clone(),
            user: Some(user.into()),
        }
    }

    /// The connection in use.
    pub fn connection(&self) -> &EnvdConnection {
        &self.conn
    }

    fn user(&self) -> Option<&str> {
        self.conn.effective_user(self.user.as_deref())
    }

    fn call_opts(&self) -> CallOptions {
        self.with_call_user(CallOptions::default())
    }

    /// `opts` with this filesystem's user, if it has one.
    fn with_call_user(&self, opts: CallOptions) -> CallOptions {
        match &self.user {
            Some(user) => opts.user(user),
            None => opts,
        }
    }

    fn files_url(&self) -> String {
        format!("{}/files", self.conn.url())
    }

    fn user_query(&self) -> Vec<(&'static str, String)> {
        self.user()
            .map(|u| vec![(files_query::USERNAME, u.to_string())])
            .unwrap_or_default()
    }

    async fn check(resp: reqwest::Response) -> Result<reqwest::Response> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.bytes().await.unwrap_or_default();
        Err(FilesystemError::from_http(status.as_u16(), &body))
    }

    // -----------------------------------------------------------------------------------------
    // Reading

    /// Downloads a file as a stream of chunks (`GET /files`). Nothing is buffered beyond the
    /// chunk in flight.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `Io` for a local file error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. A partly written local file is left
    /// as it is.
    pub async fn read_stream(&self, path: &str) -> Result<ByteStream> {
        let resp = self.get_file(path).await?;
        Ok(Box::pin(resp.bytes_stream().map_err(std::io::Error::other)))
    }

    /// `GET /files` of `path` as this filesystem's user, its error statuses mapped.
    async fn get_file(&self, path: &str) -> Result<reqwest::Response> {
        let mut query = vec![(files_query::PATH, path.to_string())];
        query.extend(self.user_query());
        let resp = self
            .conn
            .http()
            .get(self.files_url())
            .query(&query)
            .send()
            .await?;
        Self::check(resp).await
    }

    /// Downloads a file into memory.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `Io` for a local file error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. A partly written local file is left
    /// as it is.
    pub async fn read(&self, path: &str) -> Result<Bytes> {
        Ok(self.get_file(path).await?.bytes().await?)
    }

    /// Downloads a UTF-8 text file.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `Io` for a local file error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. A partly written local file is left
    /// as it is.
    pub async fn read_text(&self, path: &str) -> Result<String> {
        let b = self.read(path).await?;
        String::from_utf8(b.to_vec()).map_err(|e| FilesystemError::Decode {
            message: format!("'{path}' is not UTF-8 text; read it as bytes with read()"),
            source: Box::new(e),
        })
    }

    /// Downloads a file straight into a local file, streaming (each received chunk is copied
    /// into one of a few recycled 256 KiB buffers, written on a blocking thread). Returns the
    /// bytes written. On a failed download the bytes received so far are left in the file.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `Io` for a local file error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. A partly written local file is left
    /// as it is.
    pub async fn read_to_file(&self, path: &str, local: impl AsRef<Path>) -> Result<u64> {
        let mut stream = self.read_stream(path).await?;
        let file = std::fs::File::create(local.as_ref())?;
        let mut sink = local_io::file_sink(file);
        let mut failure = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => {
                    // A stopped writer's error comes from `finish`.
                    if sink.write(c).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    failure = Some(FilesystemError::from_body(e));
                    break;
                }
            }
        }
        let written = sink.finish().await?;
        match failure {
            Some(f) => Err(f),
            None => Ok(written),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Writing

    /// Writes a file (creating its parents), replacing any existing content.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write(&self, path: &str, data: impl Into<Bytes>) -> Result<WriteInfo> {
        self.write_with(path, data, &WriteOptions::default()).await
    }

    /// Writes a file with options (gzip on the wire, metadata).
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write_with(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        opts: &WriteOptions,
    ) -> Result<WriteInfo> {
        let mut out = self
            .write_files_with(vec![WriteEntry::bytes(path, data)], opts)
            .await?;
        out.pop()
            .ok_or_else(|| FilesystemError::Protocol("envd reported no written file".into()))
    }

    /// Writes a file from a stream, never holding it whole in memory.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write_stream<S>(
        &self,
        path: &str,
        stream: S,
        opts: &WriteOptions,
    ) -> Result<WriteInfo>
    where
        S: futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let mut out = self
            .write_files_with(vec![WriteEntry::stream(path, stream)], opts)
            .await?;
        out.pop()
            .ok_or_else(|| FilesystemError::Protocol("envd reported no written file".into()))
    }

    /// Uploads a local file, streamed from disk.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write_from_file(
        &self,
        path: &str,
        local: impl AsRef<Path>,
        opts: &WriteOptions,
    ) -> Result<WriteInfo> {
        let mut out = self
            .write_files_with(vec![WriteEntry::file(path, local.as_ref())], opts)
            .await?;
        out.pop()
            .ok_or_else(|| FilesystemError::Protocol("envd reported no written file".into()))
    }

    /// Writes several files in one request (multipart), in order.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write_files(&self, files: Vec<WriteEntry>) -> Result<Vec<WriteInfo>> {
        self.write_files_with(files, &WriteOptions::default()).await
    }

    /// Writes several files with options. One file goes as a raw octet-stream body when envd
    /// supports it (≥ 0.5.7), else as multipart; several files go as one multipart request,
    /// or, with gzip, as one octet-stream request each.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `NotEnoughSpace` when the sandbox disk is
    /// full; `Io` when a local file cannot be read.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped during the upload, the file in the sandbox may be missing, partly
    /// written or complete; write it again.
    pub async fn write_files_with(
        &self,
        files: Vec<WriteEntry>,
        opts: &WriteOptions,
    ) -> Result<Vec<WriteInfo>> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        if !opts.metadata.is_empty() {
            self.conn.require(Feature::FileMetadata)?;
        }
        let octet = self
            .conn
            .envd_version()
            .supports(Feature::OctetStreamUpload)
            && !opts.force_multipart;
        if opts.gzip {
            self.conn.require(Feature::OctetStreamUpload)?;
            if opts.force_multipart {
                return Err(FilesystemError::InvalidArgument {
                    message:
                        "gzip uploads use octet-stream bodies; do not force multipart with gzip"
                            .into(),
                });
            }
        }
        if octet && (files.len() == 1 || opts.gzip) {
            let mut out = Vec::with_capacity(files.len());
            for f in files {
                out.push(self.upload_octet(f, opts).await?);
            }
            return Ok(out);
        }
        self.upload_multipart(files, opts).await
    }

    fn upload_request(&self, path: Option<&str>, opts: &WriteOptions) -> reqwest::RequestBuilder {
        let mut query = Vec::new();
        if let Some(p) = path {
            query.push((files_query::PATH, p.to_string()));
        }
        query.extend(self.user_query());
        let mut req = self.conn.http().post(self.files_url()).query(&query);
        for (k, v) in &opts.metadata {
            req = req.header(format!("X-Metadata-{k}"), v);
        }
        req
    }

    async fn entry_stream(data: WriteData) -> Result<(ByteStream, Option<u64>)> {
        Ok(match data {
            WriteData::Bytes(b) => {
                let len = b.len() as u64;
                (
                    Box::pin(futures::stream::once(async move { Ok(b) })),
                    Some(len),
                )
            }
            WriteData::Stream(s) => (s, None),
            WriteData::File(p) => {
                let (f, len) = tokio::task::spawn_blocking(
                    move || -> std::io::Result<(std::fs::File, u64)> {
                        let f = std::fs::File::open(&p)?;
                        let len = f.metadata()?.len();
                        Ok((f, len))
                    },
                )
                .await
                .map_err(|e| FilesystemError::Io(std::io::Error::other(e.to_string())))??;
                (Box::pin(local_io::read_file(f, len)), Some(len))
            }
        })
    }

    async fn upload_octet(&self, entry: WriteEntry, opts: &WriteOptions) -> Result<WriteInfo> {
        let (stream, len) = Self::entry_stream(entry.data).await?;
        let mut req = self
            .upload_request(Some(&entry.path), opts)
            .header("content-type", "application/octet-stream");
        let body = if opts.gzip {
            req = req.header("content-encoding", "gzip");
            reqwest::Body::wrap_stream(e2b_file_io::gzip_stream(stream))
        } else {
            if let Some(len) = len {
                req = req.header("content-length", len);
            }
            reqwest::Body::wrap_stream(stream)
        };
        let mut infos = self.send_upload(req.body(body)).await?;
        infos
            .pop()
            .ok_or_else(|| FilesystemError::Protocol("envd reported no written file".into()))
    }

    async fn upload_multipart(
        &self,
        files: Vec<WriteEntry>,
        opts: &WriteOptions,
    ) -> Result<Vec<WriteInfo>> {
        let single = (files.len() == 1).then(|| files[0].path.clone());
        let mut form = reqwest::multipart::Form::new();
        for f in files {
            let (stream, len) = Self::entry_stream(f.data).await?;
            let body = reqwest::Body::wrap_stream(stream);
            let part = match len {
                Some(l) => reqwest::multipart::Part::stream_with_length(body, l),
                None => reqwest::multipart::Part::stream(body),
            };
            let part = part
                .file_name(f.path)
                .mime_str("application/octet-stream")
                .map_err(|e| FilesystemError::Decode {
                    message: "cannot build a multipart part".to_owned(),
                    source: Box::new(e),
                })?;
            form = form.part("file", part);
        }
        let req = self.upload_request(single.as_deref(), opts).multipart(form);
        self.send_upload(req).await
    }

    async fn send_upload(&self, req: reqwest::RequestBuilder) -> Result<Vec<WriteInfo>> {
        let resp = Self::check(req.send().await?).await?;
        let body = resp.bytes().await?;
        let infos: Vec<WriteInfo> =
            serde_json::from_slice(&body).map_err(|e| FilesystemError::Decode {
                message: "cannot parse envd's upload answer".to_owned(),
                source: Box::new(e),
            })?;
        if infos.is_empty() {
            return Err(FilesystemError::Protocol(
                "envd reported no written file".into(),
            ));
        }
        Ok(infos)
    }

    // -----------------------------------------------------------------------------------------
    // RPCs

    /// Lists a directory down to `depth` levels (1 = its direct entries), lexical depth-first.
    /// Entries envd cannot type (dangling symlinks, devices) are left out, as the E2B SDKs do.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call.
    pub async fn list(&self, path: &str, depth: u32) -> Result<Vec<EntryInfo>> {
        if depth < 1 {
            return Err(FilesystemError::InvalidArgument {
                message: "depth should be at least 1".into(),
            });
        }
        let req = self.conn.request(
            pb::ListDirRequest {
                path: path.to_string(),
                depth,
            },
            &self.call_opts(),
        )?;
        let resp = self.conn.filesystem().list_dir(req).await?.into_inner();
        Ok(resp
            .entries
            .into_iter()
            .map(EntryInfo::from_pb)
            .filter(|e| e.file_type != FileType::Other)
            .collect())
    }

    /// Whether a path exists.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call.
    pub async fn exists(&self, path: &str) -> Result<bool> {
        match self.get_info(path).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Information about a path (`Stat`).
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call.
    pub async fn get_info(&self, path: &str) -> Result<EntryInfo> {
        let req = self.conn.request(
            pb::StatRequest {
                path: path.to_string(),
            },
            &self.call_opts(),
        )?;
        let resp = self.conn.filesystem().stat(req).await?.into_inner();
        resp.entry
            .map(EntryInfo::from_pb)
            .ok_or_else(|| FilesystemError::Protocol("Stat returned no entry".into()))
    }

    /// Creates a directory and its parents. `Ok(false)` if it already exists.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `AlreadyExists` where the target exists.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn make_dir(&self, path: &str) -> Result<bool> {
        let req = self.conn.request(
            pb::MakeDirRequest {
                path: path.to_string(),
            },
            &self.call_opts(),
        )?;
        match self.conn.filesystem().make_dir(req).await {
            Ok(_) => Ok(true),
            Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(false),
            Err(s) => Err(s.into()),
        }
    }

    /// Renames (moves) a file or directory, creating the destination's parents.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `AlreadyExists` where the target exists.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn rename(&self, old_path: &str, new_path: &str) -> Result<EntryInfo> {
        let msg = pb::MoveRequest {
            source: old_path.to_string(),
            destination: new_path.to_string(),
        };
        let req = self.conn.request(msg, &self.call_opts())?;
        let resp = self.conn.filesystem().r#move(req).await?.into_inner();
        resp.entry
            .map(EntryInfo::from_pb)
            .ok_or_else(|| FilesystemError::Protocol("Move returned no entry".into()))
    }

    /// Removes a file or a directory tree. Removing a missing path succeeds.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `AlreadyExists` where the target exists.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, envd may or may not have applied it;
    /// check before retrying.
    pub async fn remove(&self, path: &str) -> Result<()> {
        let req = self.conn.request(
            pb::RemoveRequest {
                path: path.to_string(),
            },
            &self.call_opts(),
        )?;
        self.conn.filesystem().remove(req).await?;
        Ok(())
    }

    /// Watches a directory. Returns once envd is watching, so every change made after this
    /// returns is reported. The handle is a stream of events; drop it (or call
    /// [`WatchHandle::stop`]) to stop.
    ///
    /// # Errors
    ///
    /// [`FilesystemError`]: `NotFound`, `PermissionDenied`, `IsDirectory`,
    /// `InvalidArgument`, `Authentication`, `UnsupportedFeature` (checked before anything is sent),
    /// `Transport`/`Envd` when envd cannot be reached; `UnsupportedFeature` for options the
    /// sandbox's envd lacks.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is changed by an unfinished call. A watcher started by envd ends when
    /// the stream is dropped.
    pub async fn watch_dir(&self, path: &str, opts: &WatchOptions) -> Result<WatchHandle> {
        if opts.recursive {
            self.conn.require(Feature::RecursiveWatch)?;
        }
        if opts.include_entry {
            self.conn.require(Feature::WatchEntryInfo)?;
        }
        if opts.allow_network_mounts {
            self.conn.require(Feature::WatchNetworkMounts)?;
        }
        let msg = pb::WatchDirRequest {
            path: path.to_string(),
            recursive: opts.recursive,
            include_entry: opts.include_entry,
            allow_network_mounts: opts.allow_network_mounts,
        };
        let call = self.with_call_user(CallOptions::streaming());
        let req = self.conn.request(msg, &call)?;
        let stream = self.conn.filesystem().watch_dir(req).await?.into_inner();
        WatchHandle::start(stream).await
    }

    // -----------------------------------------------------------------------------------------
    // URLs

    fn signed_url(
        &self,
        path: Option<&str>,
        operation: FileOperation,
        opts: &UrlOptions,
    ) -> Result<String> {
        let mut params: Vec<(&str, String)> = Vec::new();
        if let Some(p) = path {
            params.push((files_query::PATH, p.to_string()));
        }
        let user = self.user().map(str::to_string);
        if let Some(u) = &user {
            params.push((files_query::USERNAME, u.clone()));
        }
        if let Some(token) = self.conn.access_token() {
            let expiration = opts.expires_in.map(|d| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|n| i64::try_from((n + d).as_secs()).unwrap_or(i64::MAX))
                    .unwrap_or(0)
            });
            let sig = file_signature(
                path.unwrap_or(""),
                operation,
                user.as_deref().unwrap_or(""),
                token,
                expiration,
            );
            params.push((files_query::SIGNATURE, sig));
            if let Some(e) = expiration {
                params.push((files_query::SIGNATURE_EXPIRATION, e.to_string()));
            }
        }
        let url = reqwest::Url::parse_with_params(&self.files_url(), &params).map_err(|e| {
            FilesystemError::InvalidArgument {
                message: format!("cannot build a URL: {e}"),
            }
        })?;
        Ok(url.to_string())
    }

    /// A URL anyone can `GET` to download `path`, signed when the sandbox has an access token.
    pub fn download_url(&self, path: &str, opts: &UrlOptions) -> Result<String> {
        self.signed_url(Some(path), FileOperation::Read, opts)
    }

    /// A URL anyone can `POST` a multipart or octet-stream body to, writing `path` (or, with
    /// `None`, the part's file name), signed when the sandbox has an access token.
    pub fn upload_url(&self, path: Option<&str>, opts: &UrlOptions) -> Result<String> {
        self.signed_url(path, FileOperation::Write, opts)
    }
}
