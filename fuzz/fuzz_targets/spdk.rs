//! `import-spdk`'s converter on any input: JSON or not, any shape and any
//! values, it converts or fails with an error — never panics — and what it
//! returns parses as a configuration (it checks that itself; a failure here
//! would be a converter that returned what it had not checked). Then
//! `export-spdk` of that configuration: `import-spdk` takes it back (its
//! keys read from the files the export names), and exporting that again
//! writes the very same JSON and keys.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::spdk::{convert, export};

mod path_kind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // What a key file holds is decided by the data too (no file system look-up).
    let read_key = |p: &std::path::Path| match p.as_os_str().len() % 3 {
        0 => Ok("DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:".to_string()),
        1 => Ok(p.to_string_lossy().into_owned()),
        _ => Err("no such file".to_string()),
    };
    if let Ok(c) = convert(text, path_kind::kind, read_key) {
        let cfg = TargetConfig::from_toml(&c.toml).expect("a converted configuration parses");
        let dir = std::path::Path::new("/keys");
        let first = export(&cfg, Some(dir));
        let written = |p: &std::path::Path| {
            first
                .key_files
                .iter()
                .find(|(f, _)| f == p)
                .map(|(_, s)| s.clone())
                .ok_or_else(|| "not written".to_string())
        };
        let back =
            convert(&first.json, path_kind::kind, written).expect("import-spdk takes export-spdk's JSON");
        let again = export(&TargetConfig::from_toml(&back.toml).unwrap(), Some(dir));
        assert_eq!((first.json, first.key_files), (again.json, again.key_files));
    }
});
