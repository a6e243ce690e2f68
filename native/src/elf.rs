//! The ELF reader of kperfdiff's Python side (`kperfdiff.targets.guest.elf` and the
//! placement planner's `vmlinux` sizes), built on the `object` crate's ELF
//! structures like the profile symboliser (elfsyms.rs).
//!
//! * [`info`]: machine, class, `PT_INTERP`, `DT_NEEDED` and the bytes of named sections;
//! * [`functions`]: the `.symtab` function symbols with a size (and every named
//!   symbol's value, for the linker's marker symbols).
//!
//! Every offset, size and count is checked against the file before it is used
//! (object's slices are views into the input, never allocations sized by a
//! header field); a damaged file is an `Err` with a short phrase that reads
//! well inside "... is a damaged ELF file (PHRASE)".
use object::elf::{self, FileHeader32, FileHeader64};
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::read::StringTable;
use object::Endianness;

/// What `kperfdiff.targets.guest.elf` needs of an ELF file.
#[derive(Debug, Default, PartialEq)]
pub struct Info<'d> {
    /// `i386`, `arm`, `x86_64`, `aarch64`, `riscv64`, `ppc64`, `s390`, else the number.
    pub machine: String,
    pub bits: u32,
    /// The program interpreter (`PT_INTERP`), if any.
    pub interp: Option<String>,
    /// `DT_NEEDED` libraries, in order.
    pub needed: Vec<String>,
    /// (name, bytes) of the sections asked for, in section header order.
    pub sections: Vec<(String, &'d [u8])>,
}

/// A function symbol (`STT_FUNC`, size above zero) of `.symtab`.
#[derive(Debug, PartialEq)]
pub struct Function<'d> {
    pub name: &'d [u8],
    /// `st_value` with bit 0 cleared (the ARM Thumb bit).
    pub value: u64,
    pub size: u64,
    /// Index into [`Functions::section_names`] of the section that holds it.
    pub section: Option<usize>,
}

#[derive(Debug, Default)]
pub struct Functions<'d> {
    pub functions: Vec<Function<'d>>,
    /// (name, st_value) of every symbol with a name, in table order.
    pub markers: Vec<(&'d [u8], u64)>,
    /// The name of each section (empty when unreadable).
    pub section_names: Vec<&'d [u8]>,
}

/// Why an ELF file cannot be read: each shown as a short phrase that reads well
/// inside "... is a damaged ELF file (PHRASE)".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfError {
    NotElf,
    TruncatedHeader,
    UnknownClass,
    UnknownVersion,
    /// object reads its structures in place, and they are not aligned.
    Unaligned,
    ProgramHeaders,
    Interpreter,
    Dynamic,
    DynamicStrings,
    NeededName,
    /// A section asked for (by name) lies outside the file.
    SectionOutside(String),
    SectionHeaders,
    SectionNames,
    /// Why [`functions`] found nothing to read: kept apart from damage so that
    /// Python can say "stripped" instead of "damaged".
    NoSymtab,
    SymbolTable,
    SymbolName,
    /// A string (the interpreter path, a needed library's name) is not UTF-8.
    NotUtf8(&'static str),
}

impl std::fmt::Display for ElfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ElfError::NotElf => "not an ELF file",
            ElfError::TruncatedHeader => "truncated header",
            ElfError::UnknownClass => "unknown class or byte order",
            ElfError::UnknownVersion => "unknown ELF version",
            ElfError::Unaligned => "header not aligned in memory",
            ElfError::ProgramHeaders => "program headers out of range",
            ElfError::Interpreter => "interpreter segment out of range",
            ElfError::Dynamic => "dynamic segment out of range",
            ElfError::DynamicStrings => "the dynamic string table lies outside the loaded segments",
            ElfError::NeededName => "a needed library's name lies outside the dynamic string table",
            ElfError::SectionOutside(name) => return write!(f, "section {name} lies outside the file"),
            ElfError::SectionHeaders => "section headers out of range",
            ElfError::SectionNames => "section name table out of range",
            ElfError::NoSymtab => "no symbol table (stripped)",
            ElfError::SymbolTable => "symbol table out of range",
            ElfError::SymbolName => "a symbol name lies outside its string table",
            ElfError::NotUtf8(what) => return write!(f, "{what} is not UTF-8 text"),
        })
    }
}

impl std::error::Error for ElfError {}

pub fn machine_name(e_machine: u16) -> String {
    match e_machine {
        elf::EM_386 => "i386".into(),
        elf::EM_ARM => "arm".into(),
        elf::EM_X86_64 => "x86_64".into(),
        elf::EM_AARCH64 => "aarch64".into(),
        elf::EM_RISCV => "riscv64".into(),
        elf::EM_PPC64 => "ppc64".into(),
        elf::EM_S390 => "s390".into(),
        n => n.to_string(),
    }
}

/// The class (32 or 64) of an ELF file, after the checks every reader shares.
fn class(data: &[u8]) -> Result<u32, ElfError> {
    if data.len() < 4 || data[..4] != elf::ELFMAG {
        return Err(ElfError::NotElf);
    }
    if data.len() < 6 {
        return Err(ElfError::TruncatedHeader);
    }
    let bits = match data[4] {
        elf::ELFCLASS32 => 32,
        elf::ELFCLASS64 => 64,
        _ => return Err(ElfError::UnknownClass),
    };
    if !matches!(data[5], elf::ELFDATA2LSB | elf::ELFDATA2MSB) {
        return Err(ElfError::UnknownClass);
    }
    let header = if bits == 64 { std::mem::size_of::<FileHeader64<Endianness>>() } else { std::mem::size_of::<FileHeader32<Endianness>>() };
    if data.len() < header {
        return Err(ElfError::TruncatedHeader);
    }
    if data[6] != elf::EV_CURRENT {
        return Err(ElfError::UnknownVersion);
    }
    Ok(bits)
}

fn header<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<(&H, Endianness), ElfError> {
    // `class` checked the size and the ident; what is left is the alignment of `data`.
    let h = H::parse(data).map_err(|_| ElfError::Unaligned)?;
    let endian = h.endian().map_err(|_| ElfError::UnknownClass)?;
    Ok((h, endian))
}

fn utf8(bytes: &[u8], what: &'static str) -> Result<String, ElfError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ElfError::NotUtf8(what))
}

/// Machine, class, interpreter, needed libraries and the sections named in `want`.
pub fn info<'d>(data: &'d [u8], want: &[&str]) -> Result<Info<'d>, ElfError> {
    match class(data)? {
        64 => info_of::<FileHeader64<Endianness>>(data, want, 64),
        _ => info_of::<FileHeader32<Endianness>>(data, want, 32),
    }
}

fn info_of<'d, H: FileHeader<Endian = Endianness>>(data: &'d [u8], want: &[&str], bits: u32) -> Result<Info<'d>, ElfError> {
    let (h, e) = header::<H>(data)?;
    let mut out = Info { machine: machine_name(h.e_machine(e)), bits, ..Default::default() };
    let phdrs = h.program_headers(e, data).map_err(|_| ElfError::ProgramHeaders)?;
    let mut dynamic: Option<&[H::Dyn]> = None;
    for ph in phdrs {
        if let Some(interp) = ph.interpreter(e, data).map_err(|_| ElfError::Interpreter)? {
            out.interp = Some(utf8(interp, "the interpreter path")?);
        } else if let Some(d) = ph.dynamic(e, data).map_err(|_| ElfError::Dynamic)? {
            dynamic = Some(d);
        }
    }
    if let Some(dynamic) = dynamic {
        let (mut strtab, mut strsz) = (None, None);
        let mut needed: Vec<u64> = Vec::new();
        for d in dynamic {
            let tag: u64 = d.d_tag(e).into();
            let val: u64 = d.d_val(e).into();
            match tag {
                0 => break, // DT_NULL
                t if t == u64::from(elf::DT_NEEDED) => needed.push(val),
                t if t == u64::from(elf::DT_STRTAB) => strtab = Some(val),
                t if t == u64::from(elf::DT_STRSZ) => strsz = Some(val),
                _ => {}
            }
        }
        if !needed.is_empty() {
            let strings = strtab
                .and_then(|a| mapped::<H>(phdrs, e, data, a, strsz))
                .ok_or(ElfError::DynamicStrings)?;
            for off in needed {
                let name = u32::try_from(off)
                    .ok()
                    .and_then(|o| strings.get(o as usize..))
                    .and_then(|s| s.iter().position(|&b| b == 0).map(|n| &s[..n]))
                    .ok_or(ElfError::NeededName)?;
                out.needed.push(utf8(name, "a needed library's name")?);
            }
        }
    }
    if !want.is_empty() {
        let sections = section_table(h, e, data)?;
        for s in sections.iter() {
            let Ok(name) = sections.section_name(e, s) else { continue };
            let Some(&w) = want.iter().find(|w| w.as_bytes() == name) else { continue };
            let bytes = s.data(e, data).map_err(|_| ElfError::SectionOutside(w.to_string()))?;
            out.sections.push((w.to_string(), bytes));
        }
    }
    Ok(out)
}

/// The file bytes at virtual address `addr` (through the first loadable
/// segment that holds it), up to `size` bytes or the end of that segment.
fn mapped<'d, H: FileHeader<Endian = Endianness>>(
    phdrs: &'d [H::ProgramHeader],
    e: Endianness,
    data: &'d [u8],
    addr: u64,
    size: Option<u64>,
) -> Option<&'d [u8]> {
    for ph in phdrs {
        if ph.p_type(e) != elf::PT_LOAD {
            continue;
        }
        let vaddr: u64 = ph.p_vaddr(e).into();
        let filesz: u64 = ph.p_filesz(e).into();
        let Some(skip) = addr.checked_sub(vaddr) else { continue };
        if skip >= filesz {
            continue;
        }
        let seg = ph.data(e, data).ok()?;
        let rest = seg.get(usize::try_from(skip).ok()?..)?;
        let n = size.map_or(rest.len(), |s| usize::try_from(s).unwrap_or(usize::MAX).min(rest.len()));
        return Some(&rest[..n]);
    }
    None
}

fn section_table<'d, H: FileHeader<Endian = Endianness>>(h: &H, e: Endianness, data: &'d [u8]) -> Result<SectionTable<'d, H>, ElfError> {
    let headers = h.section_headers(e, data).map_err(|_| ElfError::SectionHeaders)?;
    let strings = if headers.is_empty() {
        StringTable::default()
    } else {
        h.section_strings(e, data, headers).map_err(|_| ElfError::SectionNames)?
    };
    Ok(SectionTable::new(headers, strings))
}

/// Function symbols with sizes, the markers and the section names of `.symtab`.
/// `Err(ElfError::NoSymtab)` when there is no symbol table.
pub fn functions(data: &[u8]) -> Result<Functions<'_>, ElfError> {
    match class(data)? {
        64 => functions_of::<FileHeader64<Endianness>>(data),
        _ => functions_of::<FileHeader32<Endianness>>(data),
    }
}

fn functions_of<H: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Functions<'_>, ElfError> {
    let (h, e) = header::<H>(data)?;
    let sections = section_table(h, e, data)?;
    if !sections.iter().any(|s| s.sh_type(e) == elf::SHT_SYMTAB) {
        return Err(ElfError::NoSymtab);
    }
    let symtab = sections.symbols(e, data, elf::SHT_SYMTAB).map_err(|_| ElfError::SymbolTable)?;
    let mut out = Functions {
        section_names: sections.iter().map(|s| sections.section_name(e, s).unwrap_or(b"")).collect(),
        ..Default::default()
    };
    for (index, sym) in symtab.enumerate() {
        if sym.st_name(e) == 0 {
            continue;
        }
        let name = symtab.symbol_name(e, sym).map_err(|_| ElfError::SymbolName)?;
        let value: u64 = sym.st_value(e).into();
        out.markers.push((name, value));
        let size: u64 = sym.st_size(e).into();
        if sym.st_type() != elf::STT_FUNC || size == 0 {
            continue;
        }
        let section = match symtab.symbol_section(e, sym, index) {
            Ok(Some(i)) if i.0 > 0 && i.0 < out.section_names.len() => Some(i.0),
            _ => None,
        };
        out.functions.push(Function { name, value: value & !1, size, section });
    }
    Ok(out)
}

// -- Python ---------------------------------------------------------------------

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

/// Runs `f` on `data` at an 8-byte aligned address: object's ELF structures
/// are read in place and need their natural alignment; a `bytes` object's
/// buffer usually has it, a copy is made when it has not.
pub(crate) fn with_aligned<T>(data: &[u8], f: impl FnOnce(&[u8]) -> T) -> T {
    if data.as_ptr().align_offset(8) == 0 {
        return f(data);
    }
    let mut words = vec![0u64; data.len().div_ceil(8)];
    // SAFETY: `words` holds at least data.len() bytes, and any bytes are a valid u64.
    let copy = unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), words.as_mut_ptr() as *mut u8, data.len());
        std::slice::from_raw_parts(words.as_ptr() as *const u8, data.len())
    };
    f(copy)
}

/// What a guarded reader of Python's bytes fails with: the file's damage, or
/// (improbably) Python's own error while the result is built.
pub(crate) enum Refusal {
    Elf(ElfError),
    Python(PyErr),
}

impl From<ElfError> for Refusal {
    fn from(e: ElfError) -> Self {
        Refusal::Elf(e)
    }
}

impl From<PyErr> for Refusal {
    fn from(e: PyErr) -> Self {
        Refusal::Python(e)
    }
}

/// `f` on `data` (aligned), a damaged file's phrase as a ValueError (so is an error of
/// Python's while the result is built) and a panic as an "internal error" ValueError
/// (never a PanicException).
pub(crate) fn guarded<T>(what: &str, data: &[u8], f: impl FnOnce(&[u8]) -> Result<T, Refusal>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| with_aligned(data, f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Refusal::Elf(e))) => Err(PyValueError::new_err(e.to_string())),
        Ok(Err(Refusal::Python(e))) => Err(PyValueError::new_err(e.to_string())),
        Err(_) => Err(PyValueError::new_err(format!("internal error while reading {what}; please report it with the file"))),
    }
}

/// `elf_info(data, sections=[])`: a dict of machine (str), bits (32 or 64),
/// interp (str or None), needed (list of str) and sections ({name: bytes} of
/// the named sections the file has). Raises ValueError with a short phrase
/// when the file is not ELF or is damaged.
#[pyfunction]
#[pyo3(signature = (data, sections=Vec::new()))]
pub fn elf_info<'py>(py: Python<'py>, data: &[u8], sections: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
    let want: Vec<&str> = sections.iter().map(String::as_str).collect();
    let d = guarded("an ELF file", data, |data| {
        let i = info(data, &want)?;
        let d = PyDict::new(py);
        let secs = PyDict::new(py);
        let fill = || -> PyResult<()> {
            d.set_item("machine", &i.machine)?;
            d.set_item("bits", i.bits)?;
            d.set_item("interp", &i.interp)?;
            d.set_item("needed", &i.needed)?;
            for (name, bytes) in &i.sections {
                secs.set_item(name, PyBytes::new(py, bytes))?;
            }
            d.set_item("sections", &secs)
        };
        fill()?;
        Ok(d)
    })?;
    Ok(d)
}

/// `elf_functions(data)`: the `.symtab` function symbols with a size, as a
/// dict of parallel lists names (str), values (int, ARM Thumb bit cleared),
/// sizes (int), sections (the name of each one's section, or None), and
/// markers ({name: value} of every named symbol, the last one of a name).
/// Raises ValueError("no symbol table (stripped)") for a stripped file and a
/// short phrase for a damaged one.
#[pyfunction]
pub fn elf_functions<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    guarded("an ELF file", data, |data| {
        let f = functions(data)?;
        let build = || -> PyResult<Bound<'py, PyDict>> {
            let sec_names: Vec<Bound<'py, PyString>> =
                f.section_names.iter().map(|n| PyString::new(py, &String::from_utf8_lossy(n))).collect();
            let names = PyList::empty(py);
            let values = PyList::empty(py);
            let sizes = PyList::empty(py);
            let sections = PyList::empty(py);
            for func in &f.functions {
                names.append(String::from_utf8_lossy(func.name))?;
                values.append(func.value)?;
                sizes.append(func.size)?;
                match func.section {
                    Some(i) => sections.append(&sec_names[i])?,
                    None => sections.append(py.None())?,
                }
            }
            let markers = PyDict::new(py);
            for (name, value) in &f.markers {
                markers.set_item(String::from_utf8_lossy(name), value)?;
            }
            let d = PyDict::new(py);
            d.set_item("names", names)?;
            d.set_item("values", values)?;
            d.set_item("sizes", sizes)?;
            d.set_item("sections", sections)?;
            d.set_item("markers", markers)?;
            Ok(d)
        };
        Ok(build()?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian ELF64 (or ELF32) file, built by hand: header, program
    /// headers (PT_INTERP, PT_LOAD of the whole file, PT_DYNAMIC), a dynamic
    /// string table, the dynamic section and, with `symtab`, section headers
    /// for .shstrtab, .strtab, .symtab and a `.text`.
    pub(crate) struct Built {
        pub bytes: Vec<u8>,
    }

    fn put(b: &mut Vec<u8>, off: usize, v: u64, width: usize) {
        if b.len() < off + width {
            b.resize(off + width, 0);
        }
        b[off..off + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }

    /// (name, value, size, type) symbols; all in section 4 (.text).
    pub(crate) fn build(bits: u32, machine: u16, symbols: &[(&str, u64, u64, u8)], with_sections: bool) -> Built {
        let w = if bits == 64 { 8 } else { 4 };
        let (ehsize, phentsize, shentsize, symsize) = if bits == 64 { (64, 56, 64, 24) } else { (52, 32, 40, 16) };
        let mut b = vec![0u8; ehsize];
        b[..4].copy_from_slice(&elf::ELFMAG);
        b[4] = if bits == 64 { 2 } else { 1 };
        b[5] = 1;
        b[6] = 1;
        put(&mut b, 16, 2, 2); // ET_EXEC
        put(&mut b, 18, machine as u64, 2);
        put(&mut b, 20, 1, 4);
        let phoff = ehsize;
        let nph = 3;
        let interp_off = phoff + nph * phentsize;
        let interp = b"/lib/ld-test.so.1\0";
        let dynstr_off = interp_off + interp.len();
        let dynstr = b"\0libfoo.so.1\0libbar.so.2\0";
        let dyn_off = (dynstr_off + dynstr.len() + 7) & !7;
        let dyns: [(u64, u64); 5] = [(1, 1), (5, dynstr_off as u64), (10, dynstr.len() as u64), (1, 13), (0, 0)];
        let mut end = dyn_off + dyns.len() * 2 * w;
        b.resize(end, 0);
        b[interp_off..interp_off + interp.len()].copy_from_slice(interp);
        b[dynstr_off..dynstr_off + dynstr.len()].copy_from_slice(dynstr);
        for (i, (t, v)) in dyns.iter().enumerate() {
            put(&mut b, dyn_off + i * 2 * w, *t, w);
            put(&mut b, dyn_off + i * 2 * w + w, *v, w);
        }
        let mut shoff = 0;
        let mut shnum = 0;
        if with_sections {
            let shstr = b"\0.shstrtab\0.strtab\0.symtab\0.text\0";
            let shstr_off = end;
            b.extend_from_slice(shstr);
            let str_off = b.len();
            let mut strtab = vec![0u8];
            let mut name_offs = Vec::new();
            for s in symbols {
                name_offs.push(strtab.len());
                strtab.extend_from_slice(s.0.as_bytes());
                strtab.push(0);
            }
            b.extend_from_slice(&strtab);
            let sym_off = (b.len() + 7) & !7;
            b.resize(sym_off + (symbols.len() + 1) * symsize, 0);
            for (i, s) in symbols.iter().enumerate() {
                let o = sym_off + (i + 1) * symsize;
                put(&mut b, o, name_offs[i] as u64, 4);
                if bits == 64 {
                    b[o + 4] = s.3;
                    put(&mut b, o + 6, 4, 2);
                    put(&mut b, o + 8, s.1, 8);
                    put(&mut b, o + 16, s.2, 8);
                } else {
                    put(&mut b, o + 4, s.1, 4);
                    put(&mut b, o + 8, s.2, 4);
                    b[o + 12] = s.3;
                    put(&mut b, o + 14, 4, 2);
                }
            }
            shoff = (b.len() + 7) & !7;
            shnum = 5;
            b.resize(shoff + shnum * shentsize, 0);
            // (name, type, offset, size, link, entsize)
            let heads: [(u64, u64, usize, usize, u64, u64); 4] = [
                (1, 3, shstr_off, shstr.len(), 0, 0),
                (11, 3, str_off, strtab.len(), 0, 0),
                (19, 2, sym_off, (symbols.len() + 1) * symsize, 2, symsize as u64),
                (27, 1, 0, 0, 0, 0),
            ];
            for (i, (name, ty, off, size, link, entsize)) in heads.iter().enumerate() {
                let o = shoff + (i + 1) * shentsize;
                put(&mut b, o, *name, 4);
                put(&mut b, o + 4, *ty, 4);
                if bits == 64 {
                    put(&mut b, o + 24, *off as u64, 8);
                    put(&mut b, o + 32, *size as u64, 8);
                    put(&mut b, o + 40, *link, 4);
                    put(&mut b, o + 56, *entsize, 8);
                } else {
                    put(&mut b, o + 16, *off as u64, 4);
                    put(&mut b, o + 20, *size as u64, 4);
                    put(&mut b, o + 24, *link, 4);
                    put(&mut b, o + 36, *entsize, 4);
                }
            }
            end = b.len();
        }
        // program headers: PT_INTERP, PT_LOAD (the whole file at address 0), PT_DYNAMIC
        let phs: [(u32, usize, usize); 3] = [(3, interp_off, interp.len()), (1, 0, end), (2, dyn_off, dyns.len() * 2 * w)];
        for (i, (ty, off, size)) in phs.iter().enumerate() {
            let o = phoff + i * phentsize;
            put(&mut b, o, *ty as u64, 4);
            if bits == 64 {
                put(&mut b, o + 8, *off as u64, 8);
                put(&mut b, o + 16, *off as u64, 8);
                put(&mut b, o + 32, *size as u64, 8);
                put(&mut b, o + 40, *size as u64, 8);
            } else {
                put(&mut b, o + 4, *off as u64, 4);
                put(&mut b, o + 8, *off as u64, 4);
                put(&mut b, o + 16, *size as u64, 4);
                put(&mut b, o + 20, *size as u64, 4);
            }
        }
        put_counts(&mut b, bits, [phoff, shoff, ehsize, phentsize, nph, shentsize, shnum]);
        Built { bytes: b }
    }

    /// The file header's table offsets, sizes and counts.
    fn put_counts(b: &mut Vec<u8>, bits: u32, v: [usize; 7]) {
        let [phoff, shoff, ehsize, phentsize, nph, shentsize, shnum] = v;
        if bits == 64 {
            put(b, 32, phoff as u64, 8);
            put(b, 40, shoff as u64, 8);
            put(b, 52, ehsize as u64, 2);
            put(b, 54, phentsize as u64, 2);
            put(b, 56, nph as u64, 2);
            put(b, 58, shentsize as u64, 2);
            put(b, 60, shnum as u64, 2);
            put(b, 62, if shnum > 0 { 1 } else { 0 }, 2);
        } else {
            put(b, 28, phoff as u64, 4);
            put(b, 32, shoff as u64, 4);
            put(b, 40, ehsize as u64, 2);
            put(b, 42, phentsize as u64, 2);
            put(b, 44, nph as u64, 2);
            put(b, 46, shentsize as u64, 2);
            put(b, 48, shnum as u64, 2);
            put(b, 50, if shnum > 0 { 1 } else { 0 }, 2);
        }
    }

    /// Copies `b` to 8-byte aligned memory (as the Python entry points do).
    fn aligned(b: &[u8]) -> Vec<u64> {
        let mut v = vec![0u64; b.len().div_ceil(8)];
        // SAFETY: v has at least b.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr() as *mut u8, b.len()) };
        v
    }

    fn bytes_of(v: &[u64], n: usize) -> &[u8] {
        // SAFETY: v holds at least n bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }
    }

    const SYMS: &[(&str, u64, u64, u8)] = &[
        ("small", 0x1000, 16, elf::STT_FUNC),
        ("thumb", 0x1041, 8, elf::STT_FUNC),
        ("_sinittext", 0x2000, 0, elf::STT_NOTYPE),
        ("nosize", 0x3000, 0, elf::STT_FUNC),
        ("data", 0x4000, 64, elf::STT_OBJECT),
    ];

    #[test]
    fn info_of_both_classes() {
        for (bits, machine, name) in [(64, elf::EM_X86_64, "x86_64"), (32, elf::EM_ARM, "arm"), (64, 4242, "4242")] {
            let b = build(bits, machine, SYMS, true);
            let v = aligned(&b.bytes);
            let i = info(bytes_of(&v, b.bytes.len()), &[".text", ".symtab", ".nothere"]).unwrap();
            assert_eq!(i.machine, name);
            assert_eq!(i.bits, bits);
            assert_eq!(i.interp.as_deref(), Some("/lib/ld-test.so.1"));
            assert_eq!(i.needed, ["libfoo.so.1", "libbar.so.2"]);
            let names: Vec<&str> = i.sections.iter().map(|s| s.0.as_str()).collect();
            assert_eq!(names, [".symtab", ".text"]);
            assert_eq!(i.sections[0].1.len(), 6 * if bits == 64 { 24 } else { 16 });
        }
    }

    #[test]
    fn functions_of_both_classes() {
        for bits in [64, 32] {
            let b = build(bits, elf::EM_ARM, SYMS, true);
            let v = aligned(&b.bytes);
            let f = functions(bytes_of(&v, b.bytes.len())).unwrap();
            let got: Vec<(&[u8], u64, u64)> = f.functions.iter().map(|f| (f.name, f.value, f.size)).collect();
            assert_eq!(got, [(&b"small"[..], 0x1000, 16), (&b"thumb"[..], 0x1040, 8)]);
            assert_eq!(f.section_names[f.functions[0].section.unwrap()], b".text");
            let markers: Vec<&[u8]> = f.markers.iter().map(|m| m.0).collect();
            assert_eq!(markers, [&b"small"[..], b"thumb", b"_sinittext", b"nosize", b"data"]);
            assert_eq!(f.markers[1].1, 0x1041); // markers keep the raw value
        }
    }

    #[test]
    fn stripped_is_its_own_error() {
        let b = build(64, elf::EM_X86_64, &[], false);
        let v = aligned(&b.bytes);
        let data = bytes_of(&v, b.bytes.len());
        assert_eq!(functions(data).unwrap_err(), ElfError::NoSymtab);
        assert_eq!(ElfError::NoSymtab.to_string(), "no symbol table (stripped)");
        // without sections asked for, a file without section headers is fine
        assert_eq!(info(data, &[]).unwrap().needed.len(), 2);
        assert!(info(data, &[".modinfo"]).unwrap().sections.is_empty());
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        assert_eq!(info(b"", &[]).unwrap_err().to_string(), "not an ELF file");
        assert_eq!(info(b"\x7fELF", &[]).unwrap_err().to_string(), "truncated header");
        assert_eq!(info(b"\x7fELF\x03\x01\x01", &[]).unwrap_err().to_string(), "unknown class or byte order");
        let b = build(64, elf::EM_X86_64, SYMS, true);
        let v = aligned(&b.bytes);
        let full = bytes_of(&v, b.bytes.len());
        // every truncation of a good file is read or refused
        for n in 0..full.len() {
            let _ = info(&full[..n], &[".text"]);
            let _ = functions(&full[..n]);
        }
        // a header with counts and offsets at their largest
        let mut bad = full.to_vec();
        for o in [32usize, 40, 56, 60] {
            let width = if o >= 52 { 2 } else { 8 };
            bad[o..o + width].fill(0xff);
        }
        let v = aligned(&bad);
        let bad = bytes_of(&v, bad.len());
        assert_eq!(info(bad, &[]).unwrap_err().to_string(), "program headers out of range");
        assert_eq!(functions(bad).unwrap_err().to_string(), "section headers out of range");
    }

    #[test]
    fn any_address_of_the_input_is_read() {
        let b = build(64, elf::EM_X86_64, SYMS, true);
        let v = aligned(&[&[0u8][..], &b.bytes].concat());
        let shifted = &bytes_of(&v, b.bytes.len() + 1)[1..];
        assert!(info(shifted, &[]).is_err()); // object refuses misaligned structures...
        let i = with_aligned(shifted, |d| info(d, &[]).map(|i| i.needed.len())); // ...so they are copied
        assert_eq!(i, Ok(2));
        assert_eq!(with_aligned(shifted, |d| functions(d).map(|f| f.functions.len())), Ok(2));
    }

    #[test]
    fn needed_name_outside_the_string_table() {
        let b = build(64, elf::EM_X86_64, &[], false);
        let mut bytes = b.bytes.clone();
        // the second DT_NEEDED (after DT_NEEDED, DT_STRTAB, DT_STRSZ) points past DT_STRSZ
        let phoff = 64;
        let dyn_off = u64::from_le_bytes(bytes[phoff + 2 * 56 + 8..phoff + 2 * 56 + 16].try_into().unwrap()) as usize;
        bytes[dyn_off + 3 * 16 + 8..dyn_off + 3 * 16 + 16].copy_from_slice(&1000u64.to_le_bytes());
        let v = aligned(&bytes);
        let err = info(bytes_of(&v, bytes.len()), &[]).unwrap_err();
        assert_eq!(err.to_string(), "a needed library's name lies outside the dynamic string table");
    }
}
