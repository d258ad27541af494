package ps

import "sync"

// seqTracker hands out push sequence numbers and knows the lowest one not
// yet acknowledged, which pushes carry so that servers can forget older
// (client, seq) pairs.
type seqTracker struct {
	mu      sync.Mutex
	last    uint64
	low     uint64 // every seq below low is done
	pending map[uint64]struct{}
}

func (s *seqTracker) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(map[uint64]struct{})
		s.low = 1
	}
	s.last++
	s.pending[s.last] = struct{}{}
	return s.last
}

func (s *seqTracker) done(seq uint64) {
	if seq == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, seq)
}

func (s *seqTracker) watermark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.low <= s.last {
		if _, ok := s.pending[s.low]; ok {
			break
		}
		s.low++
	}
	return s.low
}
