// Package plotfile writes a column of gonum plots to an SVG or PNG file,
// the format chosen by the file's extension: the one way the replay's and
// the stragglers benchmark's plots reach disk.
package plotfile
