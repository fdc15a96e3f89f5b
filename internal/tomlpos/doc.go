// Package tomlpos says where each key of a TOML document is, so that the
// packages loading TOML files (config, spec) can report every mistake as
// file:line: key: message.
//
// BurntSushi/toml v1.6.0 records key positions but keeps them private, so
// [Lines] and [Paths] scan the text of a document that has already parsed.
// [Error] is the located error both packages return, and [SyntaxError]
// locates the parser's own errors the same way.
package tomlpos
