//! Known defects of the upstream crates, probed at run time so that an upgrade
//! can be judged: the reader works around them and reports what it found
//! (the `crate_sample_read_defect` header fact, and the function of that name
//! the Python side calls). Below the stages: `header` and lib.rs both use it.
use crate::abi::{FORMAT_GROUP, FORMAT_ID, FORMAT_LOST};
use byteorder::LittleEndian;
use linux_perf_data::Endianness;
use linux_perf_event_reader::RawData;

/// Whether linux-perf-event-reader's own SampleRecord parser still mishandles
/// PERF_SAMPLE_READ with PERF_FORMAT_GROUP|ID|LOST (true for 0.10.2). We never
/// use that parser for samples; this is reported so an upgrade can be judged.
pub fn crate_sample_read_defect() -> bool {
    use linux_perf_event_reader::{
        BranchSampleFormat, ReadFormat, RecordIdParseInfo, RecordParseInfo, SampleFormat, SampleRecord,
    };
    let info = RecordParseInfo {
        endian: Endianness::LittleEndian,
        sample_format: SampleFormat::IP | SampleFormat::READ | SampleFormat::CALLCHAIN,
        branch_sample_format: BranchSampleFormat::empty(),
        read_format: ReadFormat::from_bits_retain(FORMAT_GROUP | FORMAT_ID | FORMAT_LOST),
        common_data_offset_from_end: None,
        sample_regs_user: 0,
        user_regs_count: 0,
        sample_regs_intr: 0,
        intr_regs_count: 0,
        id_parse_info: RecordIdParseInfo { nonsample_record_id_offset_from_end: None, sample_record_id_offset_from_start: None },
        nonsample_record_time_offset_from_end: None,
        sample_record_time_offset_from_start: None,
    };
    // ip; read {nr=2; {value, id, lost} x 2}; callchain {nr=1; ip}
    let words: [u64; 10] = [0x1234, 2, 10, 100, 0, 20, 101, 0, 1, 0x1234];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match SampleRecord::parse::<LittleEndian>(RawData::Single(&bytes), 2, &info) {
        Ok(s) => s.callchain.map(|c| c.len() != 1 || c.get(0) != Some(0x1234)).unwrap_or(true),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documents the upstream defect our own sample parser works around; when
    /// this fails after an upgrade, the crate may have been fixed.
    #[test]
    fn linux_perf_event_reader_0_10_2_misreads_group_read_values() {
        assert!(crate_sample_read_defect());
    }
}
