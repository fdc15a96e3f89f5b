// Package tomlpos says where each key of a TOML document is, so that the
// packages loading TOML files (config, spec, overlay) can report every
// mistake as file:line: key: message.
//
// BurntSushi/toml v1.6.0 records key positions but keeps them private, so
// [Lines] and [Paths] scan the text of a document that has already parsed.
// [Error] is the located error the loaders return. [Decode] is the one way
// in: it refuses documents over [MaxSize] or nested deeper than [MaxDepth]
// before the parser sees them, and locates the parser's own errors with
// the same scan.
package tomlpos
