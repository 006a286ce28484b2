//! `import-nvmetcli`'s converter on any input: JSON or not, any shape and any
//! values, it converts or fails with an error — never panics — and what it
//! returns parses as a configuration (it checks that itself; a failure here
//! would be a converter that returned what it had not checked). Then
//! `export-nvmetcli` of that configuration: `import-nvmetcli` takes it back,
//! and exporting that again writes the very same JSON (moving to nvmet and
//! back loses or changes nothing more the second time).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::nvmetcli::{convert, export};

mod path_kind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(c) = convert(text, path_kind::kind) {
        let cfg = TargetConfig::from_toml(&c.toml).expect("a converted configuration parses");
        let first = export(&cfg, path_kind::kind);
        let back =
            convert(&first.json, path_kind::kind).expect("import-nvmetcli takes export-nvmetcli's JSON");
        let again = export(&TargetConfig::from_toml(&back.toml).unwrap(), path_kind::kind);
        assert_eq!(first.json, again.json);
    }
});
