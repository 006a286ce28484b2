//! The rows of `nvmeof_tests::conformance` (commands a host can get wrong)
//! against our target: each gets the status the table wants from us. The
//! interop suite's `statuses` client runs the same rows against Linux nvmet.

use nvmeof_tests::conformance::{Conformance, Peer};
use nvmeof_tests::harness::*;

#[tokio::test]
async fn conformance_rows_get_the_statuses_nvmet_or_the_spec_gives() {
    let (_server, addr) = start(&default_config()).await;
    let rows = bounded(60, Conformance::new(addr, SUBNQN, Peer::Ours).run()).await;
    let failed: Vec<String> = rows.iter().filter(|r| !r.passed()).map(|r| r.to_string()).collect();
    assert!(rows.len() >= 30, "{} rows ran", rows.len());
    assert!(failed.is_empty(), "rows failed:\n{}", failed.join("\n"));
}

/// Each row checks what it sent: a table wanting other statuses fails.
#[tokio::test]
async fn conformance_rows_fail_when_the_answer_differs() {
    let (_server, addr) = start(&default_config()).await;
    // nvmet's column, asked of our target: the rows where the two differ fail.
    let rows = bounded(60, Conformance::new(addr, SUBNQN, Peer::Nvmet { file: true }).run()).await;
    let failed: Vec<&str> = rows.iter().filter(|r| !r.passed()).map(|r| r.name).collect();
    assert!(failed.contains(&"set features: Save set"), "{failed:?}");
    assert!(failed.contains(&"compare: a block with its own data"), "{failed:?}");
    assert!(failed.contains(&"verify: 8 blocks"), "{failed:?}");
    assert!(failed.contains(&"read: past the end"), "{failed:?}");
}
