-- record_field: reads one field of a packed retry or scheduled record
-- (work/locate.go, recordFieldScript). Go embeds this file; the Python and
-- Node clients' job lookups run the same bytes.
local p = redis.call('HGET', KEYS[1], ARGV[1])
if not p then return false end
local f = cmsgpack.unpack(p)
for i = 1, #f, 2 do
  if f[i] == ARGV[2] then return f[i + 1] end
end
return false
