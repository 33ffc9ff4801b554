//go:build !linux

// Package proc holds the Linux process details baton relies on. On other
// systems it holds only the line below, so that a build for them stops with
// one clear error instead of a runtime surprise.
package proc

// baton runs on Linux only: it relies on prctl (a child subreaper, process
// names), /proc (process start times and trees), Pdeathsig and inotify.
const _ = "baton runs on Linux only (it needs prctl, /proc, Pdeathsig and inotify)" + 0
