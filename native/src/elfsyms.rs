//! User-space symbols: function symbols of an ELF file, found by build id or path.
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub struct ElfSyms {
    /// (file offset start, file offset end, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// Sorted function symbols: start address, end address, name.
    starts: Vec<u64>,
    ends: Vec<u64>,
    /// Where each symbol's name is in `file` (offset, length): names are not
    /// copied, as a big library's (librustc_driver) run to tens of megabytes.
    names: Vec<(u64, u32)>,
    /// A read-only map of the file.
    file: memmap2::Mmap,
}

impl ElfSyms {
    /// Symbols of `data`; with `image`, the segments (file offset -> address)
    /// are taken from it instead (for a separate debug file, whose program
    /// headers may not keep the original file offsets). None when a file is not one object
    /// reads, or its build id is not `want_build_id`: the caller tries the next candidate.
    pub fn parse(data: memmap2::Mmap, image: Option<&[u8]>, want_build_id: Option<&[u8]>) -> Option<Self> {
        let (segments, starts, ends, names) = Self::read(&data, image, want_build_id)?;
        // The pages read so far go back to the page cache: a big library's symbol table
        // is read once, and only the names samples land in are read again, a page at a time.
        // SAFETY: a read-only map of a file: released pages read back from the file when
        // touched again, and nothing holds a reference into them across this call.
        let _ = unsafe { data.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        Some(ElfSyms { segments, starts, ends, names, file: data })
    }

    /// The file's bytes (the image a separate debug file's segments come from).
    pub fn bytes(&self) -> &[u8] {
        &self.file
    }

    #[allow(clippy::type_complexity)]
    fn read(data: &[u8], image: Option<&[u8]>, want_build_id: Option<&[u8]>)
            -> Option<(Vec<(u64, u64, u64)>, Vec<u64>, Vec<u64>, Vec<(u64, u32)>)> {
        let file = object::File::parse(data).ok()?;
        let image_file = match image {
            Some(b) => Some(object::File::parse(b).ok()?),
            None => None,
        };
        let seg_file = image_file.as_ref().unwrap_or(&file);
        if let Some(want) = want_build_id {
            if let Ok(Some(have)) = file.build_id() {
                // perf pads build ids to 20 bytes; compare the common prefix.
                let n = have.len().min(want.len());
                if n == 0 || have[..n] != want[..n] {
                    return None; // the build id differs from the recorded one
                }
            }
        }
        let mut segments: Vec<(u64, u64, u64)> = seg_file
            .segments()
            .filter_map(|s| {
                // Memory size, not file size: separate debug files keep the
                // program headers but not the bytes.
                let (off, _) = s.file_range();
                (s.size() > 0).then_some((off, off + s.size(), s.address()))
            })
            .collect();
        segments.sort_unstable();
        fn collect<'d: 'f, 'f>(syms: &mut Vec<(u64, u64, &'d str)>, it: impl Iterator<Item = object::Symbol<'d, 'f>>) {
            for s in it {
                if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
                    continue;
                }
                if let Ok(name) = s.name() {
                    if !name.is_empty() {
                        syms.push((s.address(), s.size(), name));
                    }
                }
            }
        }
        let mut syms: Vec<(u64, u64, &str)> = Vec::new();
        collect(&mut syms, file.symbols());
        if syms.is_empty() {
            collect(&mut syms, file.dynamic_symbols());
        }
        // Prefer sized, global-looking names at one address: sort by address, then longest size.
        // Aliases with the same address, size and name length are left to the
        // (unstable) sort, as before: breaking the tie by name would rename a
        // few symbols of existing profiles.
        syms.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.len().cmp(&b.2.len())));
        syms.dedup_by(|later, first| later.0 == first.0);
        let n = syms.len();
        let mut starts = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        for i in 0..n {
            let (a, size, _) = &syms[i];
            let next = if i + 1 < n { syms[i + 1].0 } else { u64::MAX };
            // Zero-sized symbols extend to the next symbol, as perf does.
            let end = if *size > 0 { a + size } else { next.min(a.saturating_add(4096)) };
            starts.push(*a);
            ends.push(end);
        }
        // Names are valid UTF-8 slices of `data` (object checked them).
        let base = data.as_ptr() as usize;
        for (_, _, name) in syms {
            let len = u32::try_from(name.len()).ok()?; // a symbol name of 4 GiB or more
            names.push(((name.as_ptr() as usize - base) as u64, len));
        }
        Some((segments, starts, ends, names))
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Name of symbol `i` (an index from `lookup`).
    pub fn name(&self, i: usize) -> &str {
        let (at, len) = self.names[i];
        let bytes = &self.file[at as usize..at as usize + len as usize];
        // Checked when parsed; a file changed underneath since reads as a placeholder.
        std::str::from_utf8(bytes).unwrap_or("[changed file]")
    }

    /// The virtual address of a file offset (the loadable segment that holds it).
    pub fn offset_to_vaddr(&self, off: u64) -> Option<u64> {
        let i = self.segments.partition_point(|s| s.0 <= off);
        // Several segments can start at or before `off`; check the nearest ones.
        for j in (0..i).rev().take(4) {
            let (start, end, vaddr) = self.segments[j];
            if off >= start && off < end {
                return Some(vaddr + (off - start));
            }
        }
        None
    }

    pub fn lookup(&self, vaddr: u64) -> Option<usize> {
        let i = self.starts.partition_point(|&a| a <= vaddr);
        if i == 0 {
            return None;
        }
        let i = i - 1;
        (vaddr < self.ends[i]).then_some(i)
    }
}

/// The ELF symbols of the DSOs met by the threads that read one file (`parallel`), or by
/// the reads of several files made together (`Options::share`: the two sides of a diff), so
/// that each file's table is read once, by the first thread that needs it (the others wait
/// for it): every thread reading it again cost each its time, and the maps and releases of
/// the files' pages stopped every thread of the process. A table is found by the recorded
/// path and build id and where the read looks for symbols (symfs, debug directories).
#[derive(Default)]
pub struct SharedSyms {
    #[allow(clippy::type_complexity)]
    files: Mutex<FxHashMap<SharedKey, Arc<OnceLock<Option<Arc<ElfSyms>>>>>>,
}

/// A recorded path, its build id, and the read's symfs and debug directories.
type SharedKey = (String, Option<Vec<u8>>, Vec<PathBuf>, Vec<PathBuf>);

impl SharedSyms {
    pub fn get(&self, path: &str, build_id: Option<&[u8]>, symfs: &[PathBuf], debug_dirs: &[PathBuf],
               load: impl FnOnce() -> Option<ElfSyms>) -> Option<Arc<ElfSyms>> {
        // the key (four allocations) is made before the lock is taken: every run of a read on
        // threads asks once for each file it meets, and the threads met here waiting for it
        let key = (path.to_string(), build_id.map(<[u8]>::to_vec), symfs.to_vec(), debug_dirs.to_vec());
        let cell = self.files.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone();
        cell.get_or_init(|| load().map(Arc::new)).clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// perf stores build ids in a 20-byte (or 24-byte) field; GNU build ids are 20 bytes.
pub fn trim_build_id(id: &[u8]) -> &[u8] {
    &id[..id.len().min(20)]
}

pub fn build_id_hex(id: &[u8]) -> String {
    hex(trim_build_id(id))
}

/// The GNU build id (hex) of an ELF file's bytes, None when it has none or is not ELF.
pub fn elf_build_id(data: &[u8]) -> Option<String> {
    match object::File::parse(data).map(|o| o.build_id()) {
        Ok(Ok(Some(id))) => Some(build_id_hex(id)),
        _ => None,
    }
}

/// Candidate files for a DSO recorded at `path` with an optional build id,
/// in the order perf would try them: `--symfs` dirs (path appended), then the
/// build-id caches (`~/.debug`), then the path itself when no symfs is given.
/// Returns (separate debug files, images).
pub fn candidates(path: &str, build_id: Option<&[u8]>, symfs: &[PathBuf], debug_dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dbgs = Vec::new();
    let mut out = Vec::new();
    let rel = path.trim_start_matches('/');
    // Separate debug files first: they carry the full symbol table.
    let roots: Vec<PathBuf> = if symfs.is_empty() { vec![PathBuf::from("/")] } else { symfs.to_vec() };
    for r in &roots {
        let dbg = r.join("usr/lib/debug");
        if let Some(id) = build_id {
            let h = build_id_hex(id);
            if h.len() > 2 {
                dbgs.push(dbg.join(".build-id").join(&h[..2]).join(format!("{}.debug", &h[2..])));
            }
        }
        if path.starts_with('/') {
            dbgs.push(dbg.join(format!("{rel}.debug")));
            dbgs.push(dbg.join(rel));
        }
    }
    for s in symfs {
        out.push(s.join(rel));
        if let Some(name) = Path::new(path).file_name() {
            out.push(s.join(name));
        }
    }
    if let Some(id) = build_id {
        let h = build_id_hex(id);
        if h.len() > 2 {
            for d in debug_dirs {
                let link = d.join(".build-id").join(&h[..2]).join(&h[2..]);
                out.push(link.join("elf"));
                out.push(link.clone());
                out.push(d.join(rel).join(&h).join("elf"));
            }
        }
    }
    if symfs.is_empty() && path.starts_with('/') {
        out.push(PathBuf::from(path));
    }
    (dbgs, out)
}
