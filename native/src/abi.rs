//! The constants of perf_event.h (and perf's own record types) the reader uses.

// perf_event_attr.sample_type
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_ADDR: u64 = 1 << 3;
pub const SAMPLE_READ: u64 = 1 << 4;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_ID: u64 = 1 << 6;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_PERIOD: u64 = 1 << 8;
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;
// perf_event_attr.read_format
pub const FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub const FORMAT_ID: u64 = 1 << 2;
pub const FORMAT_GROUP: u64 = 1 << 3;
pub const FORMAT_LOST: u64 = 1 << 4;
// perf_event_attr flags
pub const ATTR_FLAG_FREQ: u64 = 1 << 10;
pub const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;

pub const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// A COMM record made by an exec (perf_event.h's PERF_RECORD_MISC_COMM_EXEC).
pub const MISC_COMM_EXEC: u16 = 1 << 13;

// Record types: the kernel's (below 64), then perf's own.
pub const REC_MMAP: u32 = 1;
pub const REC_LOST: u32 = 2;
pub const REC_COMM: u32 = 3;
pub const REC_EXIT: u32 = 4;
pub const REC_FORK: u32 = 7;
pub const REC_SAMPLE: u32 = 9;
pub const REC_MMAP2: u32 = 10;
pub const REC_LOST_SAMPLES: u32 = 13;
pub const REC_FINISHED_ROUND: u32 = 68;
pub const REC_COMPRESSED: u32 = 81;
pub const REC_COMPRESSED2: u32 = 83;

// Context markers in a call chain.
pub const CTX_HV: u64 = (-32i64) as u64;
pub const CTX_KERNEL: u64 = (-128i64) as u64;
pub const CTX_USER: u64 = (-512i64) as u64;
pub const CTX_GUEST: u64 = (-2048i64) as u64;
pub const CTX_GUEST_KERNEL: u64 = (-2176i64) as u64;
pub const CTX_GUEST_USER: u64 = (-2560i64) as u64;
pub const CTX_MAX: u64 = (-4095i64) as u64;

// The cpumode of a sample (the low bits of a record's misc).
#[allow(dead_code)] // perf's name for the mode no symbol source is picked for
pub const MODE_UNKNOWN: u8 = 0;
pub const MODE_KERNEL: u8 = 1;
pub const MODE_USER: u8 = 2;
pub const MODE_HV: u8 = 3;
pub const MODE_GUEST_KERNEL: u8 = 4;
pub const MODE_GUEST_USER: u8 = 5;
