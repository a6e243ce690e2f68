//! kperfdiff's native core: reads perf.data and aggregates samples.
use pyo3::prelude::*;

/// Version of the native module, so Python can tell a stale build.
#[pyfunction]
fn native_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(native_version, m)?)?;
    Ok(())
}
