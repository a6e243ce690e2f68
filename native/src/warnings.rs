//! The warnings a read ends with: what of the file could not be read, what
//! was skipped as damaged, and what could not be symbolized.
use crate::decode::Counts;
use crate::layout::Layout;
use crate::order::Cut;
use crate::symbolize::Symbols;

/// Appends the closing warnings to `w`, in order. `cut`: why the records
/// stopped before the end of the data, when they did.
pub fn closing(
    name: &str,
    cut: Option<Cut>,
    layout: &Layout,
    counts: &Counts,
    overflowed: u64,
    syms: &Symbols,
    w: &mut Vec<String>,
) {
    truncation(name, cut, layout, counts.samples, w);
    skipped(name, counts, overflowed, w);
    unresolved(name, syms, w);
}

fn truncation(name: &str, cut: Option<Cut>, layout: &Layout, samples: u64, w: &mut Vec<String>) {
    let truncated_at = layout.truncated_at;
    if let Some(reason) = cut {
        w.push(format!("{name} is truncated ({reason}); read {samples} samples before the cut"));
    } else if let Some(at) = truncated_at {
        if layout.expected_end > layout.file_len {
            w.push(format!(
                "{name} is truncated at byte {at} (its header says the data runs to byte {}); read {samples} samples before the cut",
                layout.expected_end
            ));
        }
    }
    if !layout.features_ok {
        w.push(if truncated_at.is_some() {
            format!("{name}: the header sections (hostname, kernel release, event names) were lost with the cut")
        } else {
            format!("{name}: the header sections (hostname, kernel release, event names) are missing or lie outside the file; events are named by their type")
        });
    }
}

fn skipped(name: &str, counts: &Counts, overflowed: u64, w: &mut Vec<String>) {
    if counts.malformed > 0 {
        w.push(format!("{name}: {} sample records were malformed and skipped", counts.malformed));
    }
    if counts.malformed_other > 0 {
        w.push(format!("{name}: {} mapping records were malformed and skipped", counts.malformed_other));
    }
    if counts.read_backwards > 0 {
        w.push(format!(
            "{name}: {} read values were below the event's previous value (damaged) and were skipped",
            counts.read_backwards
        ));
    }
    if overflowed > 0 {
        w.push(format!(
            "{name}: {overflowed} samples were skipped because their period would overflow the event's 64-bit total (damaged)"
        ));
    }
    if counts.unknown_ids > 0 {
        w.push(format!("{name}: {} read values named an unknown event id and were skipped", counts.unknown_ids));
    }
}

fn unresolved(name: &str, syms: &Symbols, w: &mut Vec<String>) {
    if syms.kernel_addrs > 0 {
        if !syms.has_kallsyms() {
            w.push(format!("{name}: no kallsyms file was given or found beside it, so kernel addresses are [unknown]"));
        } else if syms.kernel_unresolved * 2 > syms.kernel_addrs && syms.kernel_addrs >= 20 {
            w.push(format!(
                "{name}: {} of {} kernel addresses are outside the kallsyms file; it is probably not the kernel that was profiled",
                syms.kernel_unresolved, syms.kernel_addrs
            ));
        }
    }
    let missing = syms.missing_user_files();
    if !missing.is_empty() {
        let shown: Vec<_> = missing.iter().take(5).cloned().collect();
        w.push(format!(
            "{name}: no symbols for {} user file(s) ({}{}); their addresses are [unknown] (use symfs)",
            missing.len(),
            shown.join(", "),
            if missing.len() > 5 { ", ..." } else { "" }
        ));
    }
}
