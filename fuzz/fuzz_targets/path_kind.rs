//! What a path is, for the configuration converters' fuzz targets: decided
//! by the input too (no file system look-up).

use nvmeof_target::nvmetcli::DeviceKind;

/// A block device, a file or nothing, by the length of the path's last
/// component: the same for a relative path and the absolute one the
/// exporters write for it.
pub fn kind(p: &std::path::Path) -> DeviceKind {
    match p.file_name().unwrap_or(p.as_os_str()).len() % 3 {
        0 => DeviceKind::Block,
        1 => DeviceKind::File(4096),
        _ => DeviceKind::Missing,
    }
}
