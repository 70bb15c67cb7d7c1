package live

import (
	"context"
	"crypto/sha256"
	"os"
	"time"
)

// Run reloads the config file on every signal from hup (SIGHUP, which the
// binary's main subscribes) and when the file's content changes (looked
// at every Options.Every), until ctx ends. Without a file it only waits.
// A refused reload is logged and kept in Status; Run goes on.
func (c *Config) Run(ctx context.Context, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if c.o.Path != "" {
		t := time.NewTicker(c.o.Every)
		defer t.Stop()
		tick = t.C
	}
	var seen os.FileInfo
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			c.log.Info().Str("file", c.o.Path).Msg("SIGHUP: reloading the config")
			_ = c.Reload()
		case <-tick:
			// The content decides (an editor may rewrite a file without
			// changing it); the stat only spares reading it every time.
			fi, err := os.Stat(c.o.Path)
			if err != nil || seen != nil && fi.ModTime().Equal(seen.ModTime()) && fi.Size() == seen.Size() {
				continue
			}
			seen = fi
			b, err := os.ReadFile(c.o.Path)
			if err != nil {
				continue
			}
			c.mu.Lock()
			same := sha256.Sum256(b) == c.fileSum
			c.mu.Unlock()
			if !same {
				c.log.Info().Str("file", c.o.Path).Msg("the config file changed: reloading it")
				_ = c.Reload()
			}
		}
	}
}
