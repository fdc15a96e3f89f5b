// Package spec is the strict schema of imgbuild's inputs: layer files
// (layers/<name>.toml), image files (images/<name>.toml) and the site file
// of mirror overrides, as docs/IMGBUILD.md describes them.
//
// Loading is strict so that a typo never silently drops a package or a
// file: unknown keys, wrong types, bad modes, relative paths, missing
// source files and unknown roles are errors, each naming the file, the line
// and the key path (see [tomlpos.Paths]), as in
//
//	layers/slurm.toml:31: files[0].mode: "644x" is not a file mode (want an octal string such as "0644")
//
// [Resolve] turns an image into a [Plan]: its layers in build order with
// the image's role applied and the site's mirrors in place, checked that
// no two layers provide the same package, repo, user, group, id, file or
// service. Layer and plan digests change with every field and every input
// file's content, and with nothing else (not with where the files are), so
// builds can cache on them.
package spec
