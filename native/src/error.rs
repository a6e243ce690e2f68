//! Why a perf.data file cannot be read, one variant a reason (as `linux-perf-data`
//! has its `Error`). Each is shown as the one sentence Python's `PerfDataError`
//! carries (lib.rs turns it into that exception); the sentences name the file.
use crate::kallsyms::KallsymsError;
use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// The file cannot be opened.
    Open { name: String, source: io::Error },
    /// Its metadata cannot be read.
    Metadata { name: String, source: io::Error },
    /// It cannot be mapped into memory.
    Map { name: String, source: io::Error },
    IsDirectory { name: String },
    /// Zero bytes: perf record wrote nothing.
    Empty { name: String },
    /// Shorter than the 8 bytes of a magic.
    TooShort { name: String },
    /// The old version-1 format (magic `PERFFILE`).
    Version1 { name: String },
    /// Neither magic of a perf.data file.
    BadMagic { name: String },
    /// The file ends inside the 104-byte header.
    HeaderCut { name: String, len: usize },
    /// The file ends before its first record.
    CutBeforeRecords { name: String, file_len: u64 },
    /// The header's sizes are impossible.
    DamagedHeader { name: String },
    /// The attribute section lists no event.
    NoEvents { name: String },
    /// `linux-perf-data` refused the (checked) header.
    Unreadable { name: String, source: linux_perf_data::Error },
    /// Beyond the limits of the record order (1 TiB of records, 8M events).
    TooLarge { name: String },
    /// Compressed records in a file whose header does not say it has them.
    UndeclaredCompression { name: String },
    /// The kallsyms file (or vmlinux) given with it cannot be used.
    Kallsyms(KallsymsError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open { name, source } => write!(f, "cannot open {name}: {source}"),
            Error::Metadata { name, source } => write!(f, "cannot read {name}: {source}"),
            Error::Map { name, source } => write!(f, "cannot map {name}: {source}"),
            Error::IsDirectory { name } => write!(f, "{name} is a directory, not a perf.data file"),
            Error::Empty { name } => write!(f, "{name} is empty; perf record wrote nothing to it"),
            Error::TooShort { name } => write!(f, "{name} is not a perf.data file (too short)"),
            Error::Version1 { name } => {
                write!(f, "{name} is a perf.data in the old version-1 format, which is not supported")
            }
            Error::BadMagic { name } => {
                write!(f, "{name} is not a perf.data file (it does not start with the PERFILE2 magic)")
            }
            Error::HeaderCut { name, len } => write!(f, "{name} is cut short inside the perf.data header ({len} bytes)"),
            Error::CutBeforeRecords { name, file_len } => {
                write!(f, "{name} is cut short before its first record (the file has {file_len} bytes)")
            }
            Error::DamagedHeader { name } => write!(f, "{name} has a damaged perf.data header"),
            Error::NoEvents { name } => write!(f, "{name} describes no events"),
            Error::Unreadable { name, source } => write!(f, "{name} is not a readable perf.data file: {source}"),
            Error::TooLarge { name } => {
                write!(f, "{name} has more than 1 TiB of records or 8M events, which is not supported")
            }
            Error::UndeclaredCompression { name } => {
                write!(f, "{name} holds compressed records but its header does not say so")
            }
            Error::Kallsyms(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Open { source, .. } | Error::Metadata { source, .. } | Error::Map { source, .. } => Some(source),
            Error::Unreadable { source, .. } => Some(source),
            Error::Kallsyms(e) => Some(e),
            _ => None,
        }
    }
}

impl From<KallsymsError> for Error {
    fn from(e: KallsymsError) -> Self {
        Error::Kallsyms(e)
    }
}
