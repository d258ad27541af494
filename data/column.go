package data

// column accumulates values in chunks and copies them once into an exactly
// sized slice at the end. Plain append grows large slices by a quarter at a
// time, so each element of a big data set is copied several times and the
// result keeps up to a quarter of its capacity unused.
type column[T any] struct {
	full [][]T
	cur  []T
	n    int // values in full
}

const (
	minChunk = 1 << 10
	maxChunk = 1 << 20
)

func (c *column[T]) add(v T) {
	if len(c.cur) == cap(c.cur) {
		c.grow()
	}
	c.cur = append(c.cur, v)
}

// grow starts a new chunk, each about as large as everything so far (up to
// maxChunk), so that small inputs allocate little and big ones few times.
func (c *column[T]) grow() {
	if c.cur != nil {
		c.full = append(c.full, c.cur)
		c.n += len(c.cur)
	}
	c.cur = make([]T, 0, min(max(c.n, minChunk), maxChunk))
}

func (c *column[T]) len() int { return c.n + len(c.cur) }

// slice returns all values in one new slice and resets c.
func (c *column[T]) slice() []T {
	out := make([]T, 0, c.len())
	for _, ch := range c.full {
		out = append(out, ch...)
	}
	out = append(out, c.cur...)
	*c = column[T]{}
	return out
}
