package replay

import "errors"

// Plot writes the plot (filled in below).
func Plot(path string, rep *Report, names []string) error { return errors.New("plot: not yet") }
