//! Thread names (comm), as perf report and perf script name a sample's process: a
//! sample belongs to its thread's comm at the time of the sample. COMM records set a
//! thread's comm (an exec, or a prctl(PR_SET_NAME) rename); a FORK record gives the new
//! thread its parent thread's comm (perf's `thread__fork`), or forgets the one an
//! earlier thread of that id had when the parent has none; tid 0 is `swapper` (perf's
//! idle thread); a thread never named is `:TID`, as perf names it (`thread__new`).
//! Records are visited in time order, so the table holds each thread's comm "now".
//!
//! Names come from the file, so they are bounded and made printable: cut at the first
//! NUL (a record without one ends at the record's end), at most `MAX_COMM` bytes (the
//! kernel's are at most 15), decoded lossily from UTF-8, control characters (which would
//! break a line-based output such as folded stacks) replaced by U+FFFD.
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// What the records before a part of the file named the threads (`history::Prefix`).
pub trait EarlierNames: Send + Sync {
    /// The name of thread `tid` when the part begins (None when it has none), as `clean` makes it.
    fn comm(&self, tid: i32) -> Option<String>;
}

/// A thread known to have no name (`by_tid`): named `:TID`.
const UNNAMED: u32 = u32::MAX;

/// The longest name kept, in bytes (the kernel's TASK_COMM_LEN is 16 with its NUL).
pub const MAX_COMM: usize = 256;

pub struct Comms<'o> {
    /// Interned names; a comm id is an index.
    names: Vec<String>,
    ids: FxHashMap<String, u32>,
    /// The comm id of each thread met (UNNAMED: known to have none).
    by_tid: FxHashMap<i32, u32>,
    /// (tid, comm id) of the last lookup, valid until a record changes a comm.
    last: Option<(i32, u32)>,
    /// What the records before this reader's part named the threads (a later part's
    /// reader: `parallel`), asked the first time a thread is met.
    pub prefix: Option<Arc<dyn EarlierNames + 'o>>,
}

impl Default for Comms<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'o> Comms<'o> {
    pub fn new() -> Self {
        let mut c =
            Comms { names: Vec::new(), ids: FxHashMap::default(), by_tid: FxHashMap::default(), last: None, prefix: None };
        let swapper = c.intern("swapper".to_string());
        c.by_tid.insert(0, swapper);
        c
    }

    /// Makes this the reader of a later part (`prefix`): a thread's name is asked of the
    /// records before the part the first time the thread is met, `swapper`'s too.
    pub fn attach(&mut self, prefix: Arc<dyn EarlierNames + 'o>) {
        self.by_tid.clear();
        self.last = None;
        self.prefix = Some(prefix);
    }

    fn intern(&mut self, name: String) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// Takes in the names of a reader of a later part of the same file (`parallel`):
    /// its comm ids in this table (new names added in the order it met them). The
    /// threads' names now are the later reader's.
    pub fn absorb(&mut self, other: &mut Comms<'o>) -> Vec<u32> {
        let map = other.names.iter().map(|n| self.intern(n.clone())).collect();
        let done = std::mem::replace(&mut self.by_tid, std::mem::take(&mut other.by_tid));
        crate::cleanup::later((done, std::mem::take(&mut other.names), std::mem::take(&mut other.ids)));
        self.last = None;
        map
    }

    /// A COMM record: thread `tid` is now named `raw` (the record's name bytes).
    pub fn set(&mut self, tid: i32, raw: &[u8]) {
        let id = self.intern(clean(raw));
        self.by_tid.insert(tid, id);
        self.last = None;
    }

    /// A FORK record: thread `tid` is new, with the comm of thread `ptid` when it has one.
    pub fn fork(&mut self, tid: i32, ptid: i32) {
        let id = self.named(ptid).unwrap_or(UNNAMED);
        self.by_tid.insert(tid, id);
        self.last = None;
    }

    /// The comm id of thread `tid` when it has a name now.
    #[inline]
    fn named(&mut self, tid: i32) -> Option<u32> {
        match self.by_tid.get(&tid) {
            Some(&UNNAMED) => None,
            Some(&id) => Some(id),
            None if self.prefix.is_some() => self.fill(tid),
            None => None,
        }
    }

    /// A thread met for the first time by a later part's reader: its name as the records
    /// before the part left it, kept (UNNAMED when they give none, so it is asked once).
    #[cold]
    #[inline(never)]
    fn fill(&mut self, tid: i32) -> Option<u32> {
        let name = self.prefix.as_ref().and_then(|p| p.comm(tid));
        // tid 0 is `swapper` until a record names it otherwise (`new`)
        let name = name.or_else(|| (tid == 0).then(|| "swapper".to_string()));
        let id = name.map(|n| self.intern(n));
        self.by_tid.insert(tid, id.unwrap_or(UNNAMED));
        id
    }

    /// The comm id of thread `tid` now (`:TID` when it was never named).
    #[inline]
    pub fn of(&mut self, tid: i32) -> u32 {
        if let Some((t, id)) = self.last {
            if t == tid {
                return id;
            }
        }
        let id = match self.named(tid) {
            Some(id) => id,
            None => self.intern(format!(":{tid}")),
        };
        self.last = Some((tid, id));
        id
    }

    #[inline]
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub fn into_names(self) -> Vec<String> {
        self.names
    }
}

/// A record's name bytes as a printable name (see the module doc).
pub fn clean(raw: &[u8]) -> String {
    let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
    let mut raw = &raw[..raw.len().min(MAX_COMM)];
    // a name cut inside a UTF-8 sequence loses the partial character, not a whole U+FFFD
    if let Err(e) = std::str::from_utf8(raw) {
        if e.error_len().is_none() {
            raw = &raw[..e.valid_up_to()];
        }
    }
    String::from_utf8_lossy(raw).chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(c: &mut Comms, tid: i32) -> String {
        let id = c.of(tid);
        c.name(id).to_string()
    }

    #[test]
    fn exec_and_rename_set_the_thread_comm() {
        let mut c = Comms::new();
        c.set(10, b"sh\0\0\0\0\0\0");
        assert_eq!(name(&mut c, 10), "sh");
        c.set(10, b"perl\0");
        assert_eq!(name(&mut c, 10), "perl");
        c.set(10, b"renamed\0");
        assert_eq!(name(&mut c, 10), "renamed");
    }

    #[test]
    fn fork_gives_the_child_its_parents_comm() {
        let mut c = Comms::new();
        c.set(10, b"sh\0");
        c.fork(11, 10);
        assert_eq!(name(&mut c, 11), "sh");
        // the parent renaming later does not rename the child
        c.set(10, b"other\0");
        assert_eq!(name(&mut c, 11), "sh");
        // a thread of the renamed parent
        c.fork(12, 10);
        assert_eq!(name(&mut c, 12), "other");
    }

    #[test]
    fn unknown_threads_are_colon_tid_and_tid_0_is_swapper() {
        let mut c = Comms::new();
        assert_eq!(name(&mut c, 1234), ":1234");
        assert_eq!(name(&mut c, -1), ":-1");
        assert_eq!(name(&mut c, 0), "swapper");
        // a fork from an unnamed parent leaves the child unnamed, forgetting a reused tid's old name
        c.set(20, b"old\0");
        c.fork(20, 999);
        assert_eq!(name(&mut c, 20), ":20");
        // one id per name
        assert_eq!(c.of(1234), c.of(1234));
        c.set(5, b"sh\0");
        c.set(6, b"sh\0");
        assert_eq!(c.of(5), c.of(6));
    }

    #[test]
    fn the_lookup_cache_follows_every_change() {
        let mut c = Comms::new();
        c.set(7, b"a\0");
        assert_eq!(name(&mut c, 7), "a");
        c.set(7, b"b\0");
        assert_eq!(name(&mut c, 7), "b");
        c.fork(7, 8);
        assert_eq!(name(&mut c, 7), ":7");
    }

    #[test]
    fn fork_loops_and_self_forks_terminate() {
        let mut c = Comms::new();
        c.set(1, b"a\0");
        c.fork(1, 1);
        assert_eq!(name(&mut c, 1), "a");
        c.fork(2, 1);
        c.fork(1, 2);
        c.fork(2, 1);
        assert_eq!((name(&mut c, 1), name(&mut c, 2)), ("a".into(), "a".into()));
    }

    #[test]
    fn hostile_names_are_bounded_and_printable() {
        // no NUL: the whole field
        assert_eq!(clean(b"noterminator"), "noterminator");
        assert_eq!(clean(b""), "");
        assert_eq!(clean(b"\0rest"), "");
        // huge: cut at MAX_COMM bytes
        let huge = vec![b'x'; 1 << 16];
        assert_eq!(clean(&huge).len(), MAX_COMM);
        // a multi-byte character cut at the limit is dropped, not half-kept
        let mut cut = vec![b'y'; MAX_COMM - 1];
        cut.extend("é".as_bytes());
        assert_eq!(clean(&cut), "y".repeat(MAX_COMM - 1));
        // invalid UTF-8 is decoded lossily; control characters cannot break lines
        assert_eq!(clean(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(clean(b"a\nb;c\td"), "a\u{fffd}b;c\u{fffd}d");
        assert_eq!(clean("héllo".as_bytes()), "héllo");
    }
}
