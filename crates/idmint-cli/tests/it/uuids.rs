//! `idmint uuid` and `idmint ulid`: ids made locally, one per line, in the form asked for,
//! v7 ids and ULIDs increasing across batches; bad arguments refused.

use idmint_core::uuid::{UuidFormat, ulid_decode, uuid_is_rfc9562_variant, uuid_version};
use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok};

#[test]
fn uuid_and_ulid_print_ids_one_per_line_without_a_server() {
    let dir = TempDir::new().unwrap();
    let one = run_ok(idmint(dir.path()).arg("uuid"));
    let id = UuidFormat::Standard.decode(one.trim_end()).unwrap();
    assert_eq!((uuid_version(id), one.len()), (4, 37), "{one:?}");

    // More than one batch (BATCH_COUNT_MAX is 100 000): increasing across batches.
    let out = run_ok(idmint(dir.path()).args([
        "uuid",
        "-n",
        "150000",
        "--version",
        "7",
        "--format",
        "hex",
    ]));
    let ids: Vec<u128> = out.lines().map(|line| UuidFormat::Hex.decode(line).unwrap()).collect();
    assert_eq!(ids.len(), 150_000);
    assert!(ids.iter().all(|&id| uuid_version(id) == 7 && uuid_is_rfc9562_variant(id)));
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "v7 ids did not increase");

    let out = run_ok(idmint(dir.path()).args(["ulid", "-n", "1000"]));
    let ids: Vec<u128> = out.lines().map(|line| ulid_decode(line).unwrap()).collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ULIDs did not increase");

    let message = run_err(idmint(dir.path()).args(["ulid", "-n", "0"]));
    assert!(message.contains("1 to 10000000"), "{message}");
    for bad in [["--version", "5"], ["--format", "braced"]] {
        let output = idmint(dir.path()).arg("uuid").args(bad).output().unwrap();
        assert!(!output.status.success(), "{bad:?} was accepted");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.contains("possible values"), "{message}");
    }
}
