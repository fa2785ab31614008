//! The key check on the embedded store (docs/store.md, "One key secret per store"):
//! proven (or adopted) when the database is opened, before anything is served, in one
//! durable transaction of its own.

use redb::{Database, ReadableTable, TableDefinition};

use super::writer::BoxError;
use crate::secret::KeyCheck;
use crate::store::key_check::KeyCheckMode;
use crate::store::keys;

/// The store's key check value ([`crate::secret::KeyCheck`]), alone in its table.
const KEY_CHECK_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("key_check");

/// Writes `check` in `mode` (when absent, or always for [`KeyCheckMode::Adopt`]) in one
/// durable transaction, as `key_check.lua` does on Redis, and answers the value held
/// after it.
pub(super) fn key_check(
    db: &Database,
    check: &KeyCheck,
    mode: KeyCheckMode,
) -> Result<Vec<u8>, BoxError> {
    let txn = db.begin_write()?;
    let held = {
        let mut table = txn.open_table(KEY_CHECK_TABLE)?;
        let held = table.get(keys::KEY_CHECK)?.map(|v| v.value().to_vec());
        match (held, mode) {
            (Some(held), KeyCheckMode::Prove) => held,
            _ => {
                table.insert(keys::KEY_CHECK, check.as_str().as_bytes())?;
                check.as_str().as_bytes().to_vec()
            }
        }
    };
    txn.commit()?;
    Ok(held)
}
