//! Kernel symbols from a kallsyms file (`/proc/kallsyms` format, optionally gzip'd).
//!
//! Lines are `ADDRESS TYPE NAME [MODULE]`. Like perf, only text, weak, data and
//! bss symbols are kept; a symbol ends where the next one starts.
use std::io::Read;
use std::path::Path;

pub struct Kallsyms {
    /// Sorted by address; one entry per address (the best name of that address).
    pub addrs: Vec<u64>,
    pub names: Vec<String>,
    /// Index into `modules`, 0 = the kernel image itself.
    pub module: Vec<u32>,
    /// Module names as perf shows them: `[kernel.kallsyms]`, `[ext4]`...
    pub modules: Vec<String>,
    /// Address of `_text` / `_stext` in this file, for relocation.
    pub text: Option<u64>,
    pub stext: Option<u64>,
}

fn read_maybe_gz(path: &Path) -> std::io::Result<Vec<u8>> {
    let raw = std::fs::read(path)?;
    if raw.len() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out)?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Rank of a symbol among several at one address: higher wins (perf prefers
/// global over weak over local, then fewer leading underscores, then the one listed last, which is what
/// perf report shows for kallsyms aliases).
fn rank(ty: u8, name: &str, line: usize) -> (u8, i32, usize) {
    let binding = match ty {
        b'T' | b'D' | b'B' => 2,
        b'W' | b'w' | b'V' | b'v' => 1,
        _ => 0,
    };
    // `__pi_` names are position-independent aliases of the real function.
    let alias = name.starts_with("__pi_") as u8;
    let underscores = name.bytes().take_while(|&c| c == b'_').count() as i32;
    (binding * 2 + 1 - alias, -underscores, line)
}

impl Kallsyms {
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = read_maybe_gz(path).map_err(|e| format!("cannot read kallsyms file {}: {}", path.display(), e))?;
        let text = String::from_utf8_lossy(&bytes);
        Self::parse(&text).map_err(|e| format!("{} is not a kallsyms file: {}", path.display(), e))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut modules: Vec<String> = vec!["[kernel.kallsyms]".to_string()];
        let mut module_index: rustc_hash::FxHashMap<&str, u32> = Default::default();
        // (addr, rank, name start, name len, module): no allocation per line.
        let mut entries: Vec<(u64, (u8, i32, usize), u32, u32, u32)> = Vec::new();
        let mut text_addr = None;
        let mut stext_addr = None;
        let mut nonzero = false;
        let mut bad_lines = 0usize;
        let base = text.as_ptr() as usize;
        for (lineno, line) in text.lines().enumerate() {
            let mut it = line.split_ascii_whitespace();
            let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else {
                if !line.trim().is_empty() {
                    bad_lines += 1;
                }
                continue;
            };
            let Ok(addr) = u64::from_str_radix(a, 16) else {
                bad_lines += 1;
                continue;
            };
            let ty = t.as_bytes()[0];
            if name == "_text" {
                text_addr = Some(addr);
            } else if name == "_stext" {
                stext_addr = Some(addr);
            }
            if !matches!(ty.to_ascii_uppercase(), b'T' | b'W' | b'D' | b'B') || name.starts_with('$') {
                continue;
            }
            if addr != 0 {
                nonzero = true;
            }
            let module = match it.next() {
                Some(m) if m.starts_with('[') => {
                    let m = m.trim_start_matches('[').trim_end_matches(']');
                    *module_index.entry(m).or_insert_with(|| {
                        modules.push(format!("[{m}]"));
                        (modules.len() - 1) as u32
                    })
                }
                _ => 0,
            };
            let start = (name.as_ptr() as usize - base) as u32;
            entries.push((addr, rank(ty, name, lineno), start, name.len() as u32, module));
        }
        if entries.is_empty() {
            return Err(if bad_lines > 0 { "no line has the form ADDRESS TYPE NAME".into() } else { "it lists no symbols".into() });
        }
        if !nonzero {
            return Err("every address is zero (copied without root or with kptr_restrict set); copy it as root".into());
        }
        // Sort by address, best-ranked first within an address, keep the first.
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        entries.dedup_by(|later, first| later.0 == first.0);
        let mut addrs = Vec::with_capacity(entries.len());
        let mut names = Vec::with_capacity(entries.len());
        let mut module = Vec::with_capacity(entries.len());
        for (a, _, start, len, m) in entries {
            addrs.push(a);
            names.push(text[start as usize..(start + len) as usize].to_string());
            module.push(m);
        }
        Ok(Kallsyms { addrs, names, module, modules, text: text_addr, stext: stext_addr })
    }

    /// Address of a reference symbol (`_text`, `_stext`) named by perf's kernel mmap.
    pub fn ref_symbol(&self, name: &str) -> Option<u64> {
        match name {
            "_text" => self.text.or(self.stext),
            "_stext" => self.stext.or(self.text),
            _ => self.names.iter().position(|n| n == name).map(|i| self.addrs[i]),
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
    fn parse_and_lookup() {
        let text = "ffffffff81000000 T _text\nffffffff81000000 T _stext\nffffffff81000100 t local_fn\n\
                    ffffffff81000100 T global_fn\nffffffff81000200 A absolute\nffffffff81000300 T last\n\
                    ffffffffc0000000 t mod_fn\t[ext4]\n";
        let k = Kallsyms::parse(text).unwrap();
        assert_eq!(k.text, Some(0xffffffff81000000));
        let i = k.lookup(0xffffffff81000150).unwrap();
        assert_eq!(k.names[i], "global_fn");
        let i = k.lookup(0xffffffff81000250).unwrap();
        assert_eq!(k.names[i], "global_fn"); // absolute symbols are not kept
        let i = k.lookup(0xffffffffc0000010).unwrap();
        assert_eq!(k.modules[k.module[i] as usize], "[ext4]");
        assert!(k.lookup(0x1000).is_none());
        assert!(k.lookup(0xffffffffc0002000).is_none());
    }

    #[test]
    fn zero_addresses_rejected() {
        assert!(Kallsyms::parse("0000000000000000 T _text\n0000000000000000 T x\n").is_err());
    }
}
