package work

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientScriptsAreWorkLua: the Python and Node clients run the very
// bytes the Go code embeds: each script of work/lua, and the keys' enqueue
// script (work/keylua/enqueue.lua, as key_enqueue.lua), is in both
// clients' lua directories (Python's are symbolic links into work, Node's
// copies), identical, and none other; the enqueue script names the group
// holders read through.
func TestClientScriptsAreWorkLua(t *testing.T) {
	// client file name → the source the Go code embeds, and its bytes
	embedded := map[string]struct{ src, lua string }{
		"enqueue.lua": {"lua/enqueue.lua", enqueueLua}, "record_field.lua": {"lua/record_field.lua", recordFieldLua},
		"wait.lua": {"lua/wait.lua", waitLua}, "unwait.lua": {"lua/unwait.lua", unwaitLua},
		"result.lua": {"lua/result.lua", resultLua}, "key_enqueue.lua": {"keylua/enqueue.lua", keyEnqueueLua}}
	src, err := filepath.Glob("lua/*.lua")
	if err != nil || len(src) != len(embedded)-1 {
		t.Fatalf("work/lua holds %v (%v), want the %d embedded scripts", src, err, len(embedded)-1)
	}
	for _, dir := range []string{"../clients/python/baton_client/lua", "../clients/node/lua"} {
		got, _ := filepath.Glob(filepath.Join(dir, "*.lua"))
		if len(got) != len(embedded) {
			t.Errorf("%s holds %v, want %d scripts, those of work/lua and key_enqueue.lua", dir, got, len(embedded))
		}
		for name, want := range embedded {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("%s: %v: run make clients-lua", dir, err)
				continue
			}
			if string(b) != want.lua {
				t.Errorf("%s/%s differs from work/%s, which Go runs: run make clients-lua", dir, name, want.src)
			}
		}
	}
	if !strings.Contains(enqueueLua, "'"+Group+"'") {
		t.Errorf("work/lua/enqueue.lua does not create the group %q", Group)
	}
}

// The keys' enqueue script, which the clients run too, names the consumer
// group itself (it makes a key's stream with the group): it must be Group.
func TestKeyEnqueueLuaNamesGroup(t *testing.T) {
	if !strings.Contains(keyEnqueueLua, "local group = '"+Group+"'") {
		t.Fatalf("work/keylua/enqueue.lua does not name the group %q", Group)
	}
}
