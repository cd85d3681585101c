package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// A database that accepts the connection and never answers does not hold
// the shell: completion gives up within completionTimeout, printing no
// names and no error.
func TestCompletionOfADatabaseThatNeverAnswersEndsWithinItsBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	env := map[string]string{
		"STUDIO_DATABASE_URL": "postgres://nobody@" + ln.Addr().String() + "/none?connect_timeout=60&sslmode=disable",
		"XDG_CONFIG_HOME":     t.TempDir(),
	}
	var out, errOut bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, now: time.Now,
		getenv: func(k string) string { return env[k] }}
	t.Chdir(t.TempDir())
	start := time.Now()
	code := a.run(context.Background(), []string{"__complete", "jobs", "trigger", ""})
	took := time.Since(start)
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if took > completionTimeout+time.Second {
		t.Errorf("completion took %s, want at most about %s", took, completionTimeout)
	}
	if out.String() != ":4\n" {
		t.Errorf("stdout = %q, want only the directive", out.String())
	}
	if s := errOut.String(); strings.Contains(s, "error") || strings.Contains(s, "goroutine") {
		t.Errorf("stderr = %q, want no error", s)
	}
}
