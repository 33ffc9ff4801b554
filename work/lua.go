package work

import _ "embed" // the scripts in lua/

// The Lua scripts that producers in other languages run too: the Python
// and Node clients (clients/python, clients/node) carry these very files
// (symbolic links into work/lua), so a job enqueued from Python, Node, the
// CLI or Go goes through the same bytes. TestClientScriptsAreWorkLua fails
// when a client's copy differs.
var (
	//go:embed lua/enqueue.lua
	enqueueLua string
	//go:embed lua/record_field.lua
	recordFieldLua string
)
