// Package indent indents JSON for a person to read, within a bound.
// Indenting adds a newline and two spaces a level at every bracket and
// comma, so a value nested deep grows with the square of its depth
// (18 KB of nested arrays indent to 160 MB); JSON leaves a value as it
// is when its indented form would take more than Max beyond it.
//
//	os.Stdout.Write(indent.JSON(b)) // b indented, or b as it is
package indent
