//! What to reload after a DDL statement, whoever ran it: a session of this proxy (before its
//! client sees the OK) or anyone (seen in the binlog). The cheap test comes first: DDL on
//! tables that neither are nor may become message tables reads nothing.

use std::collections::BTreeSet;

use super::engine::Engine;
use super::table::TableKey;
use crate::sql::{contains_ignore_ascii_case, DdlEffect};

/// The reload a DDL statement calls for.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterDdl {
    Nothing,
    /// These tables, by name.
    Tables(BTreeSet<TableKey>),
    /// The whole catalog: the statement could not be followed, or its unqualified names placed.
    Catalog,
}

/// What to reload after `sql`, whose effect is `effect`, succeeded with `default_schema` as the
/// current database (`None`: unknown, or none).
pub fn plan(
    engine: &Engine,
    sql: &[u8],
    effect: DdlEffect,
    default_schema: Option<&str>,
) -> AfterDdl {
    match effect {
        DdlEffect::Nothing => AfterDdl::Nothing,
        DdlEffect::Database(db) => AfterDdl::Tables(engine.tables_in(&db).into_iter().collect()),
        DdlEffect::Tables {
            tables,
            message_comment,
        } => {
            let may_matter = message_comment
                || tables.iter().any(|t| engine.holds_name(&t.name))
                || engine.names_a_table(sql);
            if !may_matter {
                return AfterDdl::Nothing;
            }
            let keys: Option<BTreeSet<TableKey>> = tables
                .into_iter()
                .map(|t| {
                    Some((
                        t.schema.or_else(|| default_schema.map(str::to_owned))?,
                        t.name,
                    ))
                })
                .collect();
            keys.map_or(AfterDdl::Catalog, AfterDdl::Tables)
        }
        DdlEffect::Unknown => {
            if contains_ignore_ascii_case(sql, b"vitess_message") || engine.names_a_table(sql) {
                AfterDdl::Catalog
            } else {
                AfterDdl::Nothing
            }
        }
    }
}

/// Runs the reload `plan` calls for.
pub async fn reload(
    engine: &std::sync::Arc<Engine>,
    after: AfterDdl,
) -> Result<(), super::reload::ReloadError> {
    match after {
        AfterDdl::Nothing => Ok(()),
        AfterDdl::Tables(keys) => engine.reload_tables(keys).await,
        AfterDdl::Catalog => engine.reload().await,
    }
}
