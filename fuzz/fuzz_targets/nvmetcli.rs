//! `import-nvmetcli`'s converter on any input: JSON or not, any shape and any
//! values, it converts or fails with an error — never panics — and what it
//! returns parses as a configuration (it checks that itself; a failure here
//! would be a converter that returned what it had not checked).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::nvmetcli::convert;

mod path_kind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = convert(text, path_kind::kind) {
        assert!(TargetConfig::from_toml(&c.toml).is_ok());
    }
});
