//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// chromedp drives the browser over the DevTools protocol: the test waits on the live DOM (no
// reload) as the machine boots, reads the command the page shows and runs it, and takes
// screenshots, which one-shot --dump-dom or --screenshot runs could not do while the page stays
// open. It is the maintained Go client of that protocol (no Node.js, no WebDriver server).

// TestLabPage opens bootd's page of the lab in a real browser (Debian's headless Chromium) and
// keeps it open while a PC netboots in QEMU: the page shows the machine waiting and the command
// that names it; the test runs that command; the same page, never reloaded, then shows the node
// pass through its states to ready, with its address, boot stage, image version and hardware.
// Screenshots of both moments are kept (lab-page-waiting.png, lab-page-ready.png; with
// LABPAGE_DOCS=1 they also become docs/lab-page-waiting.png and docs/lab-page.png, the README's
// pictures).
func TestLabPage(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ip", "go", "chromium")
	requireFiles(t, filepath.Join(vlab.IPXEDir, "undionly.kpxe"))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	kept := keptDir(t)
	lab := newLab(ctx, t, "page", "10.80.0.1/24")
	b := startBootd(ctx, t, lab, dir)
	defer logTailOnFailure(t, b.Proc.LogPath)

	browser := openBrowser(ctx, t, lab, dir)
	page := "http://" + lab.Addr.Addr().String() + "/"
	if err := chromedp.Do(browser, chromedp.EmulateViewport(1500, 900), chromedp.Navigate(page), chromedp.WaitVisible("#lab")); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	if _, err := chromedp.Run(browser, chromedp.Evaluate[string](`window.loadedOnce = "yes"`)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	if text := domText(t, browser, "#waiting"); !strings.Contains(text, "No machine is waiting") {
		t.Fatalf("empty lab's page: %q", text)
	}

	spec := pc("page-pc", "52:54:00:e2:e0:20", vlab.BIOS)
	mac := spec.MAC.String()
	vm, err := lab.StartVM(ctx, spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	row := `#waiting tr[data-mac="` + mac + `"]`
	waitDOM(ctx, t, browser, "the machine waiting on the page", `document.querySelector('`+row+`') !== null`)
	command := domText(t, browser, row+" .command")
	stands := domText(t, browser, row+" .stands")
	t.Logf("the page: %s %s; %s", mac, stands, command)
	if want := "bootd assign master --mac " + mac; command != want {
		t.Fatalf("the page names the machine with %q, want %q", command, want)
	}
	if !strings.Contains(stands, "at its discovery screen") || !strings.Contains(domText(t, browser, row+" .vendor"), "QEMU") {
		t.Errorf("waiting row: stands %q, vendor %q", stands, domText(t, browser, row+" .vendor"))
	}
	docs(t, screenshot(ctx, t, browser, filepath.Join(kept, "lab-page-waiting.png")), "lab-page-waiting.png")

	// Run the command the page shows, as an admin would copy it.
	args := strings.Fields(strings.TrimPrefix(command, "bootd "))
	if out, err := b.CLI(ctx, args...); err != nil {
		t.Fatalf("bootd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	node := `#nodes tr[data-node="master"]`
	states := watchStates(ctx, t, browser, node, "ready")
	t.Logf("states the page showed for master, in order: %s", strings.Join(states, " → "))
	if states[0] == "ready" {
		t.Errorf("the page showed master ready at once (%v): it did not follow the boot", states)
	}
	for cell, want := range map[string]string{".address": "10.80.0.100", ".role": "master", ".version": "master 1",
		".stage": "reported its hardware", ".hardware": " CPU"} {
		if got := domText(t, browser, node+" "+cell); !strings.Contains(got, want) {
			t.Errorf("master's %s cell: %q, want %q", cell, got, want)
		}
	}
	if text := domText(t, browser, "#waiting"); !strings.Contains(text, "No machine is waiting") {
		t.Errorf("the named machine still waits on the page: %q", text)
	}
	if same, err := chromedp.Run(browser, chromedp.Evaluate[string](`window.loadedOnce || "reloaded"`)); err != nil || same != "yes" {
		t.Errorf("the page was loaded again (%q, %v): it must update in place", same, err)
	}
	docs(t, screenshot(ctx, t, browser, filepath.Join(kept, "lab-page-ready.png")), "lab-page.png")
	if err := vm.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// docs writes png as docs/name when LABPAGE_DOCS is set: the README shows what the test saw.
func docs(t *testing.T, png []byte, name string) {
	t.Helper()
	if os.Getenv("LABPAGE_DOCS") == "" {
		return
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// keptDir is where the test's screenshots stay after it: $VLAB_ARTIFACTS/<test> when set (CI
// uploads it), else bin/e2e/<test> in the repository (ignored by git).
func keptDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("VLAB_ARTIFACTS")
	if base == "" {
		base = filepath.Join("..", "bin", "e2e")
	}
	dir := filepath.Join(base, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openBrowser starts headless Chromium inside the lab's network namespace (bootd answers only
// there), with a fresh profile and nothing that would reach outside: no component updates, sync,
// background networking or QUIC. It is stopped when the test ends.
func openBrowser(ctx context.Context, t *testing.T, lab *vlab.Lab, dir string) context.Context {
	t.Helper()
	wrapper := filepath.Join(dir, "chromium-in-lab")
	script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s chromium \"$@\"\n", lab.Name)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(wrapper), chromedp.UserDataDir(profile), chromedp.Headless, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.NoSandbox,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.CombinedOutput(logFile(t, filepath.Join(dir, "chromium.log"))),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(browser); err != nil { // starts the browser
		t.Fatalf("start chromium: %v\n%s", err, vlab.TailFile(filepath.Join(dir, "chromium.log"), 20))
	}
	return browser
}

func logFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// domText is the text of the first element matching sel, "" when there is none.
func domText(t *testing.T, browser context.Context, sel string) string {
	t.Helper()
	js := fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel)
	s, err := chromedp.Run(browser, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// waitDOM polls the page every 250 ms until the JavaScript expression cond holds; the page
// updates itself, nothing reloads it.
func waitDOM(ctx context.Context, t *testing.T, browser context.Context, what, cond string) {
	t.Helper()
	for {
		ok, err := chromedp.Run(browser, chromedp.Evaluate[bool](cond))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never on the page: %v", what, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// watchStates records the data-state of row as the page shows it, every 250 ms, until it is
// final, and returns each state it saw, in order.
func watchStates(ctx context.Context, t *testing.T, browser context.Context, row, final string) []string {
	t.Helper()
	var seen []string
	js := fmt.Sprintf(`(document.querySelector(%q) || {dataset: {}}).dataset.state || ""`, row)
	for {
		state, err := chromedp.Run(browser, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		if state != "" && (len(seen) == 0 || seen[len(seen)-1] != state) {
			seen = append(seen, state)
		}
		if state == final {
			return seen
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never %s on the page; it showed %v", row, final, seen)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// screenshot keeps a PNG of the whole page at path and returns it.
func screenshot(ctx context.Context, t *testing.T, browser context.Context, path string) []byte {
	t.Helper()
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return png
}
