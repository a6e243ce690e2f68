//! Kernel symbols from a kallsyms file (`/proc/kallsyms` format, optionally gzip'd), a
//! System.map or a vmlinux (its `.symtab` functions, and its build id), and kperfdiff's one
//! parser of kallsyms lines (also System.map's, for `place --sizes`).
//!
//! Lines are `ADDRESS TYPE NAME [MODULE]`, fields separated by ASCII whitespace:
//! ADDRESS is hexadecimal (an optional '+', up to 64 bits), TYPE the first byte of
//! the second field, a fourth field starting with '[' names the module and anything
//! after it is ignored. Like perf, the profile reader keeps only text, weak, data
//! and bss symbols; a symbol ends where the next one starts.
use crate::elf::ElfError;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub struct Kallsyms {
    /// Sorted by address; one entry per address (the best name of that address).
    pub addrs: Vec<u64>,
    /// Names, one after another: symbol i is `names_buf[name_ends[i - 1]..name_ends[i]]`
    /// (one allocation for the whole table instead of one per symbol).
    names_buf: String,
    name_ends: Vec<u32>,
    /// Index into `modules`, 0 = the kernel image itself.
    pub module: Vec<u32>,
    /// Module names as perf shows them: `[kernel.kallsyms]`, `[ext4]`...
    pub modules: Vec<String>,
    /// The lowest and highest symbol address of each module (as `modules`).
    spans: Vec<Option<(u64, u64)>>,
    /// Address of `_text` / `_stext` in this file, for relocation.
    pub text: Option<u64>,
    pub stext: Option<u64>,
    /// Where the kernel's text and image end (`_etext`, `_end`), when listed.
    pub etext: Option<u64>,
    pub end: Option<u64>,
    /// The GNU build id (hex) of a vmlinux read as the symbol source; None for a text file.
    pub build_id: Option<String>,
}

/// Why a kallsyms file's bytes are no symbol table (a phrase, read after "... is not a kallsyms file: ").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Names are found by 32-bit offsets.
    TooLarge,
    /// Lines, none of them a symbol's.
    NoLineParses,
    NoSymbols,
    /// Copied without root or with kptr_restrict set.
    AllZero,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::TooLarge => "it is larger than 4 GiB",
            ParseError::NoLineParses => "no line has the form ADDRESS TYPE NAME",
            ParseError::NoSymbols => "it lists no symbols",
            ParseError::AllZero => "every address is zero (copied without root or with kptr_restrict set); copy it as root",
        })
    }
}

/// Why a vmlinux gives no kernel symbols: its ELF, or the symbols read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmlinuxError {
    Elf(ElfError),
    Symbols(ParseError),
}

impl fmt::Display for VmlinuxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmlinuxError::Elf(e) => e.fmt(f),
            VmlinuxError::Symbols(e) => e.fmt(f),
        }
    }
}

/// Why the kallsyms file (or vmlinux) given to the reader cannot be used.
#[derive(Debug)]
pub enum KallsymsError {
    /// It cannot be read (or inflated).
    Read { path: PathBuf, source: std::io::Error },
    Vmlinux { path: PathBuf, reason: VmlinuxError },
    NotKallsyms { path: PathBuf, reason: ParseError },
}

impl fmt::Display for KallsymsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KallsymsError::Read { path, source } => write!(f, "cannot read kallsyms file {}: {}", path.display(), source),
            KallsymsError::Vmlinux { path, reason } => {
                write!(f, "{} is a vmlinux kperfdiff cannot use: {}", path.display(), reason)
            }
            KallsymsError::NotKallsyms { path, reason } => write!(f, "{} is not a kallsyms file: {}", path.display(), reason),
        }
    }
}

impl std::error::Error for KallsymsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KallsymsError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A kallsyms file's bytes: mapped (a plain file), or read and inflated (gzip).
enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

fn read_maybe_gz(path: &Path) -> std::io::Result<Bytes> {
    let f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    let raw = if meta.is_file() && meta.len() > 0 {
        // SAFETY: a read-only map of a regular file, read through before load returns
        // (what is kept is copied out of it).
        Bytes::Mapped(unsafe { memmap2::Mmap::map(&f)? })
    } else {
        let mut v = Vec::new();
        (&f).read_to_end(&mut v)?;
        Bytes::Read(v)
    };
    if raw.len() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out)?;
        Ok(Bytes::Read(out))
    } else {
        Ok(raw)
    }
}

/// Rank of a symbol among several at one address, packed in a u64: higher
/// wins (perf prefers global over weak over local, then fewer leading
/// underscores, then the one listed last, which is what perf report shows for
/// kallsyms aliases). `line` orders the lines that share an address and makes the rank unique.
fn rank(ty: u8, name: &[u8], line: usize) -> u64 {
    let binding: u64 = match ty {
        b'T' | b'D' | b'B' => 2,
        b'W' | b'w' | b'V' | b'v' => 1,
        _ => 0,
    };
    // `__pi_` names are position-independent aliases of the real function.
    let alias = name.starts_with(b"__pi_") as u64;
    let underscores = name.iter().take_while(|&&c| c == b'_').count().min(0xffff) as u64;
    ((binding * 2 + 1 - alias) << 56) | ((0xffff - underscores) << 40) | (line as u64 & ((1 << 40) - 1))
}

fn is_space(c: u8) -> bool {
    c.is_ascii_whitespace()
}

/// The next whitespace-separated field of `line` from `*at`.
fn field<'a>(line: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let mut i = *at;
    while i < line.len() && is_space(line[i]) {
        i += 1;
    }
    if i == line.len() {
        *at = i;
        return None;
    }
    let s = i;
    while i < line.len() && !is_space(line[i]) {
        i += 1;
    }
    *at = i;
    Some(&line[s..i])
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    // As u64::from_str_radix(_, 16): an optional '+', then 1..=16 significant digits.
    let s = s.strip_prefix(b"+").unwrap_or(s);
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = HEX[c as usize];
        if d == 0xff {
            return None;
        }
        v = v.checked_mul(16)?.checked_add(d as u64)?;
    }
    Some(v)
}

/// Hex digit values; 0xff for a byte that is not one.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// The index of the first ASCII whitespace byte of `s` at or after `i` (`s.len()` if none),
/// eight bytes at a time: a word with a byte below 0x21 has that byte's top bit set in
/// `(w - 0x21..) & !w & 0x80..`, and the lowest such byte is exactly the first one
/// below 0x21 (a borrow only runs upward from a byte that is below), which is then
/// looked at alone (it may be a control byte that is not whitespace).
#[inline]
fn space_from(s: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    while i + 8 <= s.len() {
        let w = u64::from_le_bytes(s[i..i + 8].try_into().unwrap());
        let low = w.wrapping_sub(0x21 * ONES) & !w & (0x80 * ONES);
        if low == 0 {
            i += 8;
            continue;
        }
        let j = i + (low.trailing_zeros() / 8) as usize;
        if is_space(s[j]) {
            return j;
        }
        i = j + 1;
    }
    while i < s.len() && !is_space(s[i]) {
        i += 1;
    }
    i
}

/// A line in the exact layout the kernel prints, at the start of `s` (which may go
/// on past the line): 16 hex digits, a space, the type letter, a space, a non-empty
/// name ending at whitespace. Returns the address, type and the end of the name;
/// None sends the line to the general parser (which gives the same answer for
/// these lines, only slower).
#[inline]
fn fast_line(s: &[u8]) -> Option<(u64, u8, usize)> {
    if s.len() < 20 || s[16] != b' ' || s[18] != b' ' || is_space(s[17]) || is_space(s[19]) {
        return None;
    }
    let (mut v, mut bad) = (0u64, 0u8);
    for &c in &s[..16] {
        let d = HEX[c as usize];
        bad |= d;
        v = v << 4 | (d & 15) as u64;
    }
    if bad == 0xff {
        return None;
    }
    Some((v, s[17], space_from(s, 20)))
}

/// One line of a kallsyms file or System.map.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub addr: u64,
    pub ty: u8,
    pub name: &'a [u8],
    /// Without its brackets (`ext4` for `[ext4]`).
    pub module: Option<&'a [u8]>,
}

/// A line with nothing but ASCII whitespace (skipped, never counted as bad).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&c| is_space(c))
}

/// One line `ADDRESS TYPE NAME [MODULE]`, or None when it does not have that form.
#[inline]
pub fn parse_line(line: &[u8]) -> Option<Line<'_>> {
    let mut at = 0;
    let (addr, ty, name) = match fast_line(line) {
        // The usual `%016x %c name[\t[module]]` layout of /proc/kallsyms.
        Some((addr, ty, name_end)) => {
            at = name_end;
            (addr, ty, &line[19..name_end])
        }
        None => {
            let a = field(line, &mut at)?;
            let t = field(line, &mut at)?;
            let name = field(line, &mut at)?;
            (parse_hex(a)?, t[0], name)
        }
    };
    Some(Line { addr, ty, name, module: module_at(line, at) })
}

/// The module named by the field of `line` after `at` (the name's end), if it starts with '['.
fn module_at(line: &[u8], mut at: usize) -> Option<&[u8]> {
    match field(line, &mut at) {
        Some(m) if m[0] == b'[' => {
            let mut m = m;
            while let [b'[', rest @ ..] = m {
                m = rest;
            }
            while let [rest @ .., b']'] = m {
                m = rest;
            }
            Some(m)
        }
        _ => None,
    }
}

/// Every line of `data`, cut where `str::lines` cuts (at '\n'), and what `parse_line`
/// reads in it (`Err(line)` when it does not parse). A line in the kernel's own
/// layout with nothing after its name is read in one pass over its bytes, which
/// also finds where it ends; any other line is cut first, then parsed.
fn each_line<'a>(data: &'a [u8], mut visit: impl FnMut(Result<Line<'a>, &'a [u8]>)) {
    let mut p = 0;
    while p < data.len() {
        let rest = &data[p..];
        if let Some((addr, ty, e)) = fast_line(rest) {
            if e == rest.len() || rest[e] == b'\n' {
                visit(Ok(Line { addr, ty, name: &rest[19..e], module: None }));
                p += e + 1;
                continue;
            }
        }
        let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
        let line = &rest[..end];
        visit(parse_line(line).ok_or(line));
        p += end + 1;
    }
}

/// `symbol_map(data)`: every line of a System.map or kallsyms file (bytes, read as UTF-8 with
/// U+FFFD for what is not) as a dict of addrs (list of int), types (str, one character a line:
/// the type byte), names (list of str), modules (True when a line names a module) and bad (the
/// number of non-blank lines that do not parse). For `kperfdiff place --sizes`, which needs every
/// symbol and its type, where the profile reader keeps only the ones samples can land in.
#[pyo3::pyfunction]
pub fn symbol_map<'py>(py: pyo3::Python<'py>, data: &[u8]) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
    use pyo3::types::{PyDictMethods, PyListMethods};
    crate::elf::guarded("a symbol map", data, |data| {
        let text = String::from_utf8_lossy(data);
        let build = || -> pyo3::PyResult<pyo3::Bound<'py, pyo3::types::PyDict>> {
            let addrs = pyo3::types::PyList::empty(py);
            let names = pyo3::types::PyList::empty(py);
            let mut types = String::new();
            let (mut modules, mut bad) = (false, 0usize);
            for line in text.lines() {
                let line = line.as_bytes();
                match parse_line(line) {
                    Some(l) => {
                        addrs.append(l.addr)?;
                        // fields are cut at ASCII whitespace of valid UTF-8: valid UTF-8
                        names.append(std::str::from_utf8(l.name).unwrap_or("\u{fffd}"))?;
                        types.push(l.ty as char);
                        modules |= l.module.is_some();
                    }
                    None if !is_blank(line) => bad += 1,
                    None => {}
                }
            }
            let d = pyo3::types::PyDict::new(py);
            d.set_item("addrs", addrs)?;
            d.set_item("types", types)?;
            d.set_item("names", names)?;
            d.set_item("modules", modules)?;
            d.set_item("bad", bad)?;
            Ok(d)
        };
        Ok(build()?)
    })
}

/// A symbol kept from a line: its address, where its name is in the file, its module and type.
#[derive(Clone, Copy)]
struct Entry {
    addr: u64,
    start: u32,
    len: u32,
    module: u32,
    ty: u8,
    /// Whether the name is ASCII (then the table holds it as the file spells it), found while
    /// the line is read: the names are read again later in address order, which is not the
    /// file's, and each first look at one then misses the caches.
    ascii: bool,
}

impl Entry {
    /// Its name, as the file `data` spells it.
    fn name<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Each thread of `Kallsyms::parse_on` reads at least this much of the file.
const PARSE_CHUNK: usize = 256 << 10;

/// What one chunk of a kallsyms file's lines holds: its kept symbols sorted by address (file
/// order within one), their modules numbered from 1 in order of first appearance in the chunk
/// (0: the kernel), the landmarks it names last, whether an address is not zero, and its lines
/// that do not parse.
struct Lines<'a> {
    entries: Vec<Entry>,
    modules: Vec<&'a [u8]>,
    text: Option<u64>,
    stext: Option<u64>,
    etext: Option<u64>,
    end: Option<u64>,
    nonzero: bool,
    bad_lines: usize,
}

impl<'a> Lines<'a> {
    fn read(data: &'a [u8], from: usize, to: usize) -> Lines<'a> {
        let mut c = Lines { entries: Vec::with_capacity((to - from) / 40), modules: Vec::new(), text: None, stext: None,
                            etext: None, end: None, nonzero: false, bad_lines: 0 };
        let mut module_index: rustc_hash::FxHashMap<&[u8], u32> = Default::default();
        // No allocation per line: where each kept name is, and its module; ranks are
        // only worked out among symbols that share an address.
        let base = data.as_ptr() as usize;
        each_line(&data[from..to], |line| {
            let Line { addr, ty, name, module } = match line {
                Ok(l) => l,
                Err(line) => {
                    c.bad_lines += !is_blank(line) as usize;
                    return;
                }
            };
            if name == b"_text" {
                c.text = Some(addr);
            } else if name == b"_stext" {
                c.stext = Some(addr);
            } else if name == b"_etext" && module.is_none() {
                c.etext = Some(addr);
            } else if name == b"_end" && module.is_none() {
                c.end = Some(addr);
            }
            if !matches!(ty.to_ascii_uppercase(), b'T' | b'W' | b'D' | b'B') || name[0] == b'$' {
                return;
            }
            c.nonzero |= addr != 0;
            let module = match module {
                Some(m) => *module_index.entry(m).or_insert_with(|| {
                    c.modules.push(m);
                    c.modules.len() as u32
                }),
                None => 0,
            };
            let start = (name.as_ptr() as usize - base) as u32;
            c.entries.push(Entry { addr, start, len: name.len() as u32, module, ty, ascii: name.is_ascii() });
        });
        c.entries.sort_by_key(|e| e.addr);
        c
    }
}

/// The symbols of a range of addresses that a table keeps: the best-ranked at each address, in
/// address order, and the bytes their names take (a name that is not UTF-8 read with U+FFFD).
struct Picked {
    entries: Vec<Entry>,
    name_bytes: usize,
}

/// The name of `e`, as the table holds it.
fn table_name<'a>(data: &'a [u8], e: &Entry) -> std::borrow::Cow<'a, [u8]> {
    let name = e.name(data);
    if e.ascii {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(String::from_utf8_lossy(name).into_owned().into_bytes())
    }
}

/// From `entries` sorted by address, in file order within an address: the best-ranked of each
/// address, kept in place.
fn pick(data: &[u8], mut entries: Vec<Entry>) -> Picked {
    let (mut kept, mut name_bytes, mut i) = (0, 0, 0);
    while i < entries.len() {
        let mut j = i + 1;
        while j < entries.len() && entries[j].addr == entries[i].addr {
            j += 1;
        }
        let best = if j == i + 1 {
            i
        } else {
            let run = &entries[i..j];
            i + (0..run.len()).max_by_key(|&k| rank(run[k].ty, run[k].name(data), k)).unwrap()
        };
        entries[kept] = entries[best];
        let e = &entries[kept];
        name_bytes += if e.ascii { e.len as usize } else { table_name(data, e).len() };
        kept += 1;
        i = j;
    }
    entries.truncate(kept);
    Picked { entries, name_bytes }
}

/// The table of consecutive ranges' picks: addresses, names, where each name ends, modules. The
/// arrays are allocated once, at their full size, and each range writes its part on a thread of its
/// own (mostly first writes to the arrays' pages, which then fault in on every thread at once).
#[allow(clippy::type_complexity)]
fn table(data: &[u8], parts: &[Picked], modules: usize) -> (Vec<u64>, String, Vec<u32>, Vec<u32>, Vec<Option<(u64, u64)>>) {
    let total: usize = parts.iter().map(|p| p.entries.len()).sum();
    let (mut addrs, mut name_ends, mut module) = (vec![0u64; total], vec![0u32; total], vec![0u32; total]);
    let mut names_buf = vec![0u8; parts.iter().map(|p| p.name_bytes).sum()];
    let write = |p: &Picked, a: &mut [u64], e: &mut [u32], m: &mut [u32], nb: &mut [u8], base: u32| {
        let mut at = 0;
        let mut spans = vec![None; modules];
        for (k, x) in p.entries.iter().enumerate() {
            let name = table_name(data, x);
            nb[at..at + name.len()].copy_from_slice(&name);
            at += name.len();
            a[k] = x.addr;
            e[k] = base + at as u32;
            m[k] = x.module;
            let s: &mut Option<(u64, u64)> = &mut spans[x.module as usize];
            *s = Some(s.map_or((x.addr, x.addr), |(lo, hi)| (lo, hi.max(x.addr))));
        }
        spans
    };
    // each range writes its part of each array; its lowest and highest address of each module
    // come back (the ranges in address order)
    let lens = || parts.iter().map(|p| p.entries.len());
    let bases = parts.iter().scan(0u32, |base, p| {
        let b = *base;
        *base += p.name_bytes as u32;
        Some(b)
    });
    let pieces: Vec<_> = parts.iter().zip(bases)
        .zip(crate::spread::pieces_mut(&mut addrs, lens()))
        .zip(crate::spread::pieces_mut(&mut name_ends, lens()))
        .zip(crate::spread::pieces_mut(&mut module, lens()))
        .zip(crate::spread::pieces_mut(&mut names_buf, parts.iter().map(|p| p.name_bytes)))
        .collect();
    let ranges_spans = crate::spread::each(pieces, |_, (((((p, base), a), e), m), nb)| write(p, a, e, m, nb, base));
    let mut spans: Vec<Option<(u64, u64)>> = vec![None; modules];
    for r in ranges_spans {
        for (s, t) in spans.iter_mut().zip(r) {
            if let Some((lo, hi)) = t {
                *s = Some(s.map_or((lo, hi), |(l, _)| (l, hi)));
            }
        }
    }
    // SAFETY: the bytes are the names one after another, each ASCII or read as UTF-8 with
    // U+FFFD, and UTF-8 strings put end to end are UTF-8.
    let names_buf = unsafe { String::from_utf8_unchecked(names_buf) };
    (addrs, names_buf, name_ends, module, spans)
}

/// The kallsyms files read last, by path, size and modification time: the
/// repetitions of a run share one, and a diff of ten profiles a side would
/// otherwise parse it ten times. A file being parsed is in the list already: the
/// two sides of a diff, read at once on two threads, parse one kallsyms once (the
/// second waits for the first's table instead of building its own).
static RECENT: std::sync::Mutex<Vec<Recent>> = std::sync::Mutex::new(Vec::new());
/// A file read: its path, size and modification time, and what it holds (once parsed; `None`
/// when its parse failed).
type Recent = (std::path::PathBuf, u64, std::time::SystemTime, Arc<OnceLock<Option<Arc<Kallsyms>>>>);
const RECENT_FILES: usize = 4;

impl Kallsyms {
    /// `load`, shared with the other reads of the same unchanged file, those at the same time
    /// included; a text file is parsed on up to `threads` threads.
    pub fn load_shared(path: &Path, threads: usize) -> Result<Arc<Self>, KallsymsError> {
        let stamp = std::fs::metadata(path).ok().and_then(|m| Some((m.len(), m.modified().ok()?)));
        let Some((len, mtime)) = stamp else {
            return Self::load_on(path, threads).map(Arc::new);
        };
        let cell = {
            let mut list = RECENT.lock().unwrap_or_else(|e| e.into_inner());
            match list.iter().position(|e| e.0 == path && e.1 == len && e.2 == mtime) {
                Some(i) => list[i].3.clone(),
                None => {
                    list.retain(|e| e.0 != path);
                    let cell = Arc::new(OnceLock::new());
                    list.insert(0, (path.to_path_buf(), len, mtime, cell.clone()));
                    list.truncate(RECENT_FILES);
                    cell
                }
            }
        };
        let mut failed = None;
        // The first caller parses; one that comes while it does waits for its table.
        let got = cell.get_or_init(|| match Self::load_on(path, threads) {
            Ok(k) => Some(Arc::new(k)),
            Err(e) => {
                failed = Some(e);
                None
            }
        });
        if let Some(k) = got {
            return Ok(k.clone());
        }
        RECENT.lock().unwrap_or_else(|e| e.into_inner()).retain(|e| !Arc::ptr_eq(&e.3, &cell));
        match failed {
            Some(e) => Err(e),
            None => Self::load_on(path, threads).map(Arc::new),   // another's parse failed: this caller's own error
        }
    }

    pub fn load(path: &Path) -> Result<Self, KallsymsError> {
        Self::load_on(path, 1)
    }

    /// `load`, a text file parsed on up to `threads` threads (`parse_on`).
    pub fn load_on(path: &Path, threads: usize) -> Result<Self, KallsymsError> {
        let path_buf = || path.to_path_buf();
        let t0 = std::time::Instant::now();
        let bytes = read_maybe_gz(path).map_err(|source| KallsymsError::Read { path: path_buf(), source })?;
        if crate::timing::on() {
            eprintln!("kperfdiff timing: kallsyms file read {:.3} ms", t0.elapsed().as_secs_f64() * 1e3);
        }
        if bytes.starts_with(b"\x7fELF") {
            return Self::from_elf(&bytes).map_err(|reason| KallsymsError::Vmlinux { path: path_buf(), reason });
        }
        Self::parse_on(&bytes, threads).map_err(|reason| KallsymsError::NotKallsyms { path: path_buf(), reason })
    }

    /// A vmlinux's function symbols (those with a size), as `parse` reads a System.map of them; its
    /// `_text`, `_stext`, `_etext` and `_end` as landmarks only (type `A`, never a sample's symbol).
    pub fn from_elf(data: &[u8]) -> Result<Self, VmlinuxError> {
        let f = crate::elf::functions(data).map_err(VmlinuxError::Elf)?;
        let mut text = String::with_capacity(f.functions.len() * 40);
        for func in &f.functions {
            text.push_str(&format!("{:016x} T {}\n", func.value, String::from_utf8_lossy(func.name)));
        }
        for (name, value) in &f.markers {
            if matches!(*name, b"_text" | b"_stext" | b"_etext" | b"_end") {
                text.push_str(&format!("{value:016x} A {}\n", String::from_utf8_lossy(name)));
            }
        }
        let mut k = Self::parse(text.as_bytes()).map_err(VmlinuxError::Symbols)?;
        k.build_id = crate::elfsyms::elf_build_id(data);
        Ok(k)
    }

    /// The symbols of a kallsyms file's bytes (names that are not UTF-8 are read with U+FFFD).
    pub fn parse(data: &[u8]) -> Result<Self, ParseError> {
        Self::parse_on(data, 1)
    }

    /// `parse` on up to `threads` threads (one per `PARSE_CHUNK` of the file at most): the
    /// same table. The lines are read in chunks cut after a newline, each chunk's symbols
    /// sorted by address; the best symbol of each address is then picked in ranges of
    /// addresses, each from every chunk's symbols in that range, in file order within an
    /// address, and the ranges write the table into arrays allocated once (`table`).
    pub fn parse_on(data: &[u8], threads: usize) -> Result<Self, ParseError> {
        if data.len() > u32::MAX as usize {
            return Err(ParseError::TooLarge);
        }
        let n = threads.min(data.len() / PARSE_CHUNK).max(1);
        let t0 = std::time::Instant::now();
        let mark = |what: &str| {
            if crate::timing::on() {
                eprintln!("kperfdiff timing: kallsyms {what} {:.3} ms", t0.elapsed().as_secs_f64() * 1e3);
            }
        };
        let mut cuts = vec![0usize];
        for i in 1..n {
            let c = (i * data.len() / n).max(*cuts.last().unwrap());
            cuts.push(data[c..].iter().position(|&b| b == b'\n').map_or(data.len(), |p| c + p + 1));
        }
        cuts.push(data.len());
        let mut chunks: Vec<Lines> = crate::spread::on_threads(n, |i| Lines::read(data, cuts[i], cuts[i + 1]));
        mark("lines read");
        // the modules in order of first appearance, each chunk's numbers in that order; the
        // landmarks as the last line naming them gives them
        let mut modules: Vec<String> = vec!["[kernel.kallsyms]".to_string()];
        let mut module_index: rustc_hash::FxHashMap<&[u8], u32> = Default::default();
        let (mut text, mut stext, mut etext, mut end) = (None, None, None, None);
        let (mut nonzero, mut bad_lines, mut kept) = (false, 0usize, 0usize);
        let mut renumber: Vec<Vec<u32>> = Vec::with_capacity(n);
        for c in &chunks {
            let mut map = vec![0u32];
            for m in &c.modules {
                map.push(*module_index.entry(m).or_insert_with(|| {
                    modules.push(format!("[{}]", String::from_utf8_lossy(m)));
                    (modules.len() - 1) as u32
                }));
            }
            renumber.push(map);
            text = c.text.or(text);
            stext = c.stext.or(stext);
            etext = c.etext.or(etext);
            end = c.end.or(end);
            nonzero |= c.nonzero;
            bad_lines += c.bad_lines;
            kept += c.entries.len();
        }
        if kept == 0 {
            return Err(if bad_lines > 0 { ParseError::NoLineParses } else { ParseError::NoSymbols });
        }
        if !nonzero {
            return Err(ParseError::AllZero);
        }
        // ranges of addresses of about the same number of symbols: every symbol of one address in one
        let mut sample: Vec<u64> = chunks.iter().flat_map(|c| c.entries.iter().step_by(256).map(|e| e.addr)).collect();
        sample.sort_unstable();
        let mut bounds: Vec<u64> = (1..n).map(|i| sample[i * sample.len() / n]).collect();
        bounds.dedup();
        let ranges = bounds.len() + 1;
        let parts: Vec<Picked> = if chunks.len() == 1 {
            // one chunk: its symbols are sorted, its modules numbered as the table numbers them
            vec![pick(data, chunks.pop().unwrap().entries)]
        } else {
            crate::spread::on_threads(ranges, |r| {
                let lo = if r == 0 { None } else { Some(bounds[r - 1]) };
                let hi = bounds.get(r).copied();
                let spans: Vec<std::ops::Range<usize>> = chunks.iter().map(|c| {
                    let from = lo.map_or(0, |lo| c.entries.partition_point(|e| e.addr < lo));
                    let to = hi.map_or(c.entries.len(), |hi| c.entries.partition_point(|e| e.addr < hi));
                    from..to
                }).collect();
                let mut entries: Vec<Entry> = Vec::with_capacity(spans.iter().map(|s| s.len()).sum());
                for ((c, map), span) in chunks.iter().zip(&renumber).zip(spans) {
                    entries.extend(c.entries[span].iter().map(|e| Entry { module: map[e.module as usize], ..*e }));
                }
                // By address, in file order within an address (a stable sort, which merges the chunks'
                // sorted runs); of the symbols at one address, the best-ranked is kept.
                entries.sort_by_key(|e| e.addr);
                pick(data, entries)
            })
        };
        mark("symbols picked by address");
        let (addrs, names_buf, name_ends, module, spans) = table(data, &parts, modules.len());
        mark("table written");
        if n > 1 {
            // freed after the read on threads this parse is for (`cleanup`)
            crate::cleanup::later((chunks.into_iter().map(|c| c.entries).collect::<Vec<_>>(),
                                   parts.into_iter().map(|p| p.entries).collect::<Vec<_>>()));
        }
        Ok(Kallsyms { addrs, names_buf, name_ends, module, modules, spans, text, stext, etext, end, build_id: None })
    }

    /// The lowest and highest symbol address of each module (index as `modules`; None for one
    /// with no symbol kept).
    pub fn module_spans(&self) -> &[Option<(u64, u64)>] {
        &self.spans
    }

    /// Name of symbol `i` (an index from `lookup`).
    pub fn name(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.name_ends[i - 1] as usize };
        &self.names_buf[start..self.name_ends[i] as usize]
    }

    /// Address of a reference symbol (`_text`, `_stext`) named by perf's kernel mmap.
    pub fn ref_symbol(&self, name: &str) -> Option<u64> {
        match name {
            "_text" => self.text.or(self.stext),
            "_stext" => self.stext.or(self.text),
            _ => (0..self.addrs.len()).find(|&i| self.name(i) == name).map(|i| self.addrs[i]),
        }
    }

    /// Index of the symbol that covers `addr`: the last one starting at or
    /// before it, if the next symbol starts after it (the last symbol of the
    /// table covers one page, as in perf).
    pub fn lookup(&self, addr: u64) -> Option<usize> {
        let i = self.addrs.partition_point(|&a| a <= addr);
        if i == 0 {
            return None;
        }
        let i = i - 1;
        if i + 1 == self.addrs.len() && addr - self.addrs[i] >= 4096 {
            return None;
        }
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parsed_on_threads_gives_the_same_table() {
        // Lines in no order, aliases at one address (across chunks too), modules met in
        // different chunks, landmarks named twice, a few lines that do not parse and names
        // that are not UTF-8.
        let mut text = Vec::new();
        let mut x = 7u64;
        for i in 0..60_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let addr = 0xffff_ffff_8100_0000u64 + (x >> 40) % 20_000 * 16;
            let ty = [b'T', b't', b'W', b'D', b'b', b'r'][(x >> 20) as usize % 6] as char;
            let name = match x % 97 {
                0 => "_text".to_string(),
                1 => "__pi_alias".to_string(),
                _ => format!("{}f{}", "_".repeat((x >> 8) as usize % 3), i % 5000),
            };
            text.extend_from_slice(format!("{addr:016x} {ty} {name}").as_bytes());
            if x % 5 == 0 {
                text.extend_from_slice(format!("\t[mod{}]", (x >> 30) % 7).as_bytes());
            }
            if x % 1009 == 0 {
                text.extend_from_slice(b" \xff\xc3");
            }
            text.push(b'\n');
            if x % 2003 == 0 {
                text.extend_from_slice(b"not a line\n\n");
            }
        }
        let one = Kallsyms::parse(&text).unwrap();
        // each module's span, as the table's addresses and modules give it
        let mut spans = vec![None; one.modules.len()];
        for (&a, &m) in one.addrs.iter().zip(&one.module) {
            let s: &mut Option<(u64, u64)> = &mut spans[m as usize];
            *s = Some(s.map_or((a, a), |(lo, hi)| (lo.min(a), hi.max(a))));
        }
        assert_eq!(one.module_spans(), &spans[..]);
        for threads in [2, 3, 7, 16] {
            let many = Kallsyms::parse_on(&text, threads).unwrap();
            assert_eq!(one.addrs, many.addrs, "{threads} threads");
            assert_eq!(one.names_buf, many.names_buf, "{threads} threads");
            assert_eq!(one.name_ends, many.name_ends, "{threads} threads");
            assert_eq!(one.module, many.module, "{threads} threads");
            assert_eq!(one.modules, many.modules, "{threads} threads");
            assert_eq!(one.module_spans(), many.module_spans(), "{threads} threads");
            assert_eq!((one.text, one.stext, one.etext, one.end), (many.text, many.stext, many.etext, many.end));
        }
        assert!(text.len() > 16 * PARSE_CHUNK / 8 && one.modules.len() == 8);
    }

    #[test]
    fn an_unchanged_file_is_parsed_once() {
        let dir = std::env::temp_dir().join(format!("kpd-kallsyms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("kallsyms");
        std::fs::write(&p, "ffffffff81000000 T _text\nffffffff81000100 T do_one\n").unwrap();
        let a = Kallsyms::load_shared(&p, 1).unwrap();
        let b = Kallsyms::load_shared(&p, 1).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // A changed file (another size) is read again.
        std::fs::write(&p, "ffffffff81000000 T _text\nffffffff81000100 T do_one\nffffffff81000200 T do_two\n").unwrap();
        let c = Kallsyms::load_shared(&p, 1).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.addrs.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_reads_at_once_share_one_parse_and_a_failed_parse_is_not_kept() {
        let dir = std::env::temp_dir().join(format!("kpd-kallsyms-once-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("kallsyms");
        let text: String = (0..200_000u64).map(|i| format!("{:016x} T f_{i}\n", 0xffffffff81000000u64 + 16 * i)).collect();
        std::fs::write(&p, text).unwrap();
        let start = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let one = s.spawn(|| { start.wait(); Kallsyms::load_shared(&p, 1).unwrap() });
            let two = s.spawn(|| { start.wait(); Kallsyms::load_shared(&p, 1).unwrap() });
            (one.join().unwrap(), two.join().unwrap())
        });
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.addrs.len(), 200_000);
        // Not kallsyms: every caller gets the error, and nothing is kept for the next.
        let bad = dir.join("bad");
        std::fs::write(&bad, [0xffu8; 64]).unwrap();
        for _ in 0..2 {
            assert!(Kallsyms::load_shared(&bad, 1).is_err());
        }
        assert!(!RECENT.lock().unwrap().iter().any(|e| e.0 == bad));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn landmarks_and_module_spans_for_the_recording_check() {
        let k = Kallsyms::parse(
            b"ffffffff81000000 T _text\nffffffff81000100 T f\nffffffff82000000 T _etext\nffffffff83000000 B _end\n\
              ffffffffc0002000 t m_b\t[m]\nffffffffc0001000 t m_a\t[m]\nffffffffc0003000 T _etext\t[x]\n",
        )
        .unwrap();
        assert_eq!((k.text, k.stext, k.etext, k.end), (Some(0xffffffff81000000), None, Some(0xffffffff82000000), Some(0xffffffff83000000)));
        let spans = k.module_spans();
        let m = k.modules.iter().position(|n| n == "[m]").unwrap();
        assert_eq!(spans[m], Some((0xffffffffc0001000, 0xffffffffc0002000)));
        assert_eq!(k.build_id, None);
    }

    fn line<'a>(addr: u64, ty: u8, name: &'a str, module: Option<&'a str>) -> Option<Line<'a>> {
        Some(Line { addr, ty, name: name.as_bytes(), module: module.map(str::as_bytes) })
    }

    #[test]
    fn one_line_grammar() {
        let p = |s: &'static str| parse_line(s.as_bytes());
        assert_eq!(p("ffffffff81000000 T _text"), line(0xffffffff81000000, b'T', "_text", None));
        assert_eq!(p("ffffffffc0000000 t mod_fn\t[ext4]"), line(0xffffffffc0000000, b't', "mod_fn", Some("ext4")));
        assert_eq!(p("c0008000  ?  x  [[a]]  extra"), line(0xc0008000, b'?', "x", Some("a")));
        assert_eq!(p("+1f Tx name other"), line(0x1f, b'T', "name", None));          // the fast and the general path agree
        assert_eq!(p("0000000000001234 Tx name"), line(0x1234, b'T', "name", None));
        assert_eq!(p("00000000000000001234 T name"), line(0x1234, b'T', "name", None));
        for bad in ["ffff T", "ffff", "fffg T name", "10000000000000000 T too_big", "+ T name", "ffff\u{e9} T name"] {
            assert_eq!(parse_line(bad.as_bytes()), None, "{bad:?}");
        }
        assert!(is_blank(b" \t\r") && !is_blank("\u{3000}".as_bytes()));
    }

    #[test]
    fn lines_read_in_one_pass_as_cut_then_parsed() {
        // Random files of kernel-layout lines, damaged by bytes the grammar cares about.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let alphabet: &[u8] = b" \t\n\r\x0c\x01[]+_$fF0aTtxz\xc3\xa9\xff";
        for _ in 0..3000 {
            let mut data = Vec::new();
            for _ in 0..next(6) {
                data.extend_from_slice(format!("{:016x} {} name_{}", next(1 << 48), ["T", "t", "W", "A"][next(4) as usize], next(99)).as_bytes());
                if next(3) == 0 {
                    data.extend_from_slice(b"\t[mod]");
                }
                data.push(b'\n');
            }
            for _ in 0..next(4) {
                let at = next(data.len() as u64 + 1) as usize;
                let c = alphabet[next(alphabet.len() as u64) as usize];
                if next(2) == 0 && at < data.len() {
                    data[at] = c;
                } else {
                    data.insert(at, c);
                }
            }
            let mut fused = Vec::new();
            each_line(&data, |l| fused.push(l.map_err(|line| is_blank(line))));
            let cut: Vec<_> = data
                .split(|&c| c == b'\n')
                .take(data.split(|&c| c == b'\n').count() - data.ends_with(b"\n") as usize)
                .map(|line| parse_line(line).ok_or(is_blank(line)))
                .collect();
            let cut = if data.is_empty() { Vec::new() } else { cut };
            assert_eq!(fused, cut, "{:?}", String::from_utf8_lossy(&data));
        }
    }

    #[test]
    fn whitespace_is_found_a_word_at_a_time() {
        for s in [&b"abcdefghij klm"[..], b"abc\x01def\x02ghijkl\tm", b"\xff\xfe\x80abcdefgh\r", b"abcdefghijklmnop", b"a\x0cb"] {
            let want = s.iter().position(|c| c.is_ascii_whitespace()).unwrap_or(s.len());
            for from in 0..=want {
                assert_eq!(space_from(s, from), want, "{s:?} from {from}");
            }
        }
    }

    #[test]
    fn names_that_are_not_utf8() {
        let k = Kallsyms::parse(b"ffffffff81000000 T _text\nffffffff81000100 T caf\xc3\xa9\nffffffff81000200 T bad\xff\xc3\n").unwrap();
        assert_eq!(k.name(1), "caf\u{e9}");
        assert_eq!(k.name(2), "bad\u{fffd}\u{fffd}");
        let k = Kallsyms::parse(b"ffffffff81000000 T a\xc3\nffffffff81000100 T \xa9b\n").unwrap();
        assert_eq!((k.name(0), k.name(1)), ("a\u{fffd}", "\u{fffd}b"));
    }

    #[test]
    fn parse_and_lookup() {
        let text = "ffffffff81000000 T _text\nffffffff81000000 T _stext\nffffffff81000100 t local_fn\n\
                    ffffffff81000100 T global_fn\nffffffff81000200 A absolute\nffffffff81000300 T last\n\
                    ffffffffc0000000 t mod_fn\t[ext4]\n";
        let k = Kallsyms::parse(text.as_bytes()).unwrap();
        assert_eq!(k.text, Some(0xffffffff81000000));
        let i = k.lookup(0xffffffff81000150).unwrap();
        assert_eq!(k.name(i), "global_fn");
        let i = k.lookup(0xffffffff81000250).unwrap();
        assert_eq!(k.name(i), "global_fn"); // absolute symbols are not kept
        let i = k.lookup(0xffffffffc0000010).unwrap();
        assert_eq!(k.modules[k.module[i] as usize], "[ext4]");
        assert!(k.lookup(0x1000).is_none());
        assert!(k.lookup(0xffffffffc0002000).is_none());
    }

    #[test]
    fn kallsyms_relocation_symbol() {
        let k = Kallsyms::parse(b"ffffffff81000000 T _text\nffffffff81000100 T f\n").unwrap();
        assert_eq!(k.ref_symbol("_text"), Some(0xffffffff81000000));
        assert_eq!(k.ref_symbol("_stext"), Some(0xffffffff81000000));
    }

    #[test]
    fn zero_addresses_rejected() {
        assert!(Kallsyms::parse(b"0000000000000000 T _text\n0000000000000000 T x\n").is_err());
    }
}
