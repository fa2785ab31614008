//! Repository consistency, apart from the daemon's behaviour: what the repository says of
//! itself holds. `.ci/run` takes cargo's target directory (`ci_script`). The source
//! layout and what the documentation names (`layout`, with `doc_references`, `names` and `function_length`), the README's quick tour
//! (`readme_tour`), what ships in deploy/ (`deploy_artifacts`, with `compose`) and the
//! shipped alert rules and dashboard (`deploy_observability`), docs/compliance.md's realm
//! profiles (`compliance`). Run them alone with
//! `cargo test --test integration consistency`.

mod ci_script;
mod compliance;
mod deploy_artifacts;
pub(crate) mod deploy_observability;
mod layout;
mod readme_tour;
