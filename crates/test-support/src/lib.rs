//! Test helpers shared by the workspace (not published).
