//! `import-nvmetcli`'s converter on any input: JSON or not, any shape and any
//! values, it converts or fails with an error — never panics — and what it
//! returns parses as a configuration (it checks that itself; a failure here
//! would be a converter that returned what it had not checked).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::nvmetcli::{convert, DeviceKind};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // What a path is decided by the data too (no file system look-up).
    let kind = |p: &std::path::Path| match p.as_os_str().len() % 3 {
        0 => DeviceKind::Block,
        1 => DeviceKind::File(4096),
        _ => DeviceKind::Missing,
    };
    if let Ok(c) = convert(text, kind) {
        assert!(TargetConfig::from_toml(&c.toml).is_ok());
    }
});
