//! Pure parsers of the two input forms: `KEY<TAB>COMMAND` lines and the TOML manifest.

pub mod lines;
pub mod manifest;
