package work

import _ "embed" // the scripts in lua/

// The Lua scripts that producers in other languages run too: the Python
// and Node clients (clients/python, clients/node) carry these very files,
// so a job enqueued from Python, Node, the CLI or Go goes through the same
// bytes, and so does a wait for its outcome or a read of its result. Python's are symbolic links into work/lua (pip follows them);
// Node's are copies, since npm packs no symbolic link (make clients-lua
// refreshes them). keylua/enqueue.lua (key_enqueue.go) goes to them too, as
// key_enqueue.lua. TestClientScriptsAreWorkLua fails when a client's
// script differs from the one Go embeds.
var (
	//go:embed lua/enqueue.lua
	enqueueLua string
	//go:embed lua/record_field.lua
	recordFieldLua string
	//go:embed lua/wait.lua
	waitLua string
	//go:embed lua/unwait.lua
	unwaitLua string
	//go:embed lua/result.lua
	resultLua string
)
