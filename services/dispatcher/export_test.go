package dispatcher

// StopWatches stops this replica's watches, as if every report they would
// give were lost: for tests of the backstop to them.
func (s *Service) StopWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watches {
		w.Stop()
	}
}
