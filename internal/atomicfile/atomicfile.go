// Package atomicfile replaces a file by rename, safely in a directory that
// others may write: a reader sees the old content or the new, never half,
// and no link planted in the directory redirects the write.
//
// Most callers need Write:
//
//	err := atomicfile.Write("/run/baton/q.run.0.json", b, 0o644)
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write puts data at path: it writes a new temporary file beside path,
// created exclusively under a random name (O_CREAT|O_EXCL, which never
// follows a symbolic link, dangling or not), and renames it over path
// (rename replaces a link at path, never its target). The temporary file is
// removed on any failure, so a full disk leaves nothing behind.
func Write(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(perm) // CreateTemp makes it 0600
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}
