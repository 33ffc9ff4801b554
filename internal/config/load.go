package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
)

// EnvRedisURL names the environment variable that supplies redis_url.
const EnvRedisURL = "BATON_REDIS_URL"

// EnvSentinelPassword names the environment variable that supplies
// redis_sentinel_password.
const EnvSentinelPassword = "BATON_REDIS_SENTINEL_PASSWORD"

// EnvHost names the environment variable that supplies host.
const EnvHost = "BATON_HOST"

// Error is a bad setting: where it came from, which key, what is wrong.
type Error struct {
	File   string // config file, or "" when the value came from a flag or env
	Line   int    // 1-based line in File, 0 when unknown
	Key    string // TOML key, e.g. "slots"
	Source string // "flag --slots" or "env BATON_REDIS_URL" when not from File
	Msg    string

	entry    int    // for a [[periodic]] entry's key: the entry's 1-based position
	entryKey string // and the key within it
}

func (e *Error) Error() string {
	var where string
	switch {
	case e.Source != "":
		return e.Source + ": " + e.Msg
	case e.File != "" && e.Line > 0:
		where = fmt.Sprintf("config %s:%d: ", e.File, e.Line)
	case e.File != "":
		where = fmt.Sprintf("config %s: ", e.File)
	}
	if e.Key == "" {
		return where + e.Msg
	}
	return where + e.Key + ": " + e.Msg
}

// Flags binds config keys to a flag set and loads the result.
type Flags struct {
	fs   *pflag.FlagSet
	vals Config // flag values; only the changed ones are used
	path string // --config
}

// GroupAnnotation is the pflag annotation naming a bound key's group, for
// help text that shows flags grouped.
const GroupAnnotation = "baton-group"

// Bind registers --config and one flag (kebab case) for each key selected
// by sel: a group name (Connection, Slots, ...), a key name ("max_payload"),
// or All. Keys not bound still come from the defaults, the file and the
// environment when Load runs. An unknown name panics: it is a programming
// mistake.
func Bind(fs *pflag.FlagSet, sel ...string) *Flags {
	f := &Flags{fs: fs, vals: Default()}
	fs.StringVarP(&f.path, "config", "c", "", "TOML config `file`")
	want := map[string]bool{}
	for _, s := range sel {
		want[s] = true
	}
	forEachKey(&f.vals, func(k key) {
		if !want[All] && !want[k.group] && !want[k.name] {
			return
		}
		delete(want, k.name)
		switch p := k.ptr.(type) {
		case *string:
			fs.StringVar(p, k.flag, *p, k.help)
		case *int:
			fs.IntVar(p, k.flag, *p, k.help)
		case *bool:
			fs.BoolVar(p, k.flag, *p, k.help)
		case *Duration:
			fs.Var(p, k.flag, k.help)
		case *[]int:
			fs.IntSliceVar(p, k.flag, *p, k.help)
		case *[]string:
			fs.StringSliceVar(p, k.flag, *p, k.help)
		default:
			panic("config: no flag type for key " + k.name)
		}
		_ = fs.SetAnnotation(k.flag, GroupAnnotation, []string{k.group})
	})
	for s := range want {
		if s != All && s != Connection && s != Slots && s != Jobs && s != Retries && s != Workers && s != Logging {
			panic("config: Bind: no key or group " + s)
		}
	}
	// standby_slots defaults to slots; say so in its help, not as "-1".
	if fl := fs.Lookup("standby-slots"); fl != nil {
		fl.DefValue = "0"
	}
	if fl := fs.Lookup("min-slots"); fl != nil { // = slots
		fl.DefValue = "0"
	}
	return f
}

// Path returns the --config value.
func (f *Flags) Path() string { return f.path }

// Load builds the effective config: defaults, file, env, flags, then checks it.
// getenv is os.Getenv in production.
func (f *Flags) Load(getenv func(string) string) (*Config, error) {
	c := Default()
	var src []byte
	if f.path != "" {
		var err error
		if src, err = os.ReadFile(f.path); err != nil {
			return nil, &Error{File: f.path, Msg: readErr(err)}
		}
		if err := decode(f.path, src, &c); err != nil {
			return nil, err
		}
	}
	fromEnv := false
	if u := getenv(EnvRedisURL); u != "" {
		c.RedisURL, fromEnv = u, true
	}
	sentEnv := false
	if p := getenv(EnvSentinelPassword); p != "" {
		c.RedisSentinelPassword, sentEnv = p, true
	}
	hostEnv := false
	if h := getenv(EnvHost); h != "" {
		c.Host, hostEnv = h, true
	}
	changed := map[string]bool{}
	dst := reflect.ValueOf(&c).Elem()
	src2 := reflect.ValueOf(&f.vals).Elem()
	forEachKey(&c, func(k key) {
		if fl := f.fs.Lookup(k.flag); fl != nil && fl.Changed {
			dst.Field(k.index).Set(src2.Field(k.index))
			changed[k.name] = true
		}
	})
	if c.StandbySlots < 0 && !changed["standby_slots"] {
		c.StandbySlots = c.Slots
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.MinSlots < 0 && !changed["min_slots"] {
		c.MinSlots = c.Slots
	}
	if err := c.Validate(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			switch {
			case changed[e.Key]:
				e.Source = "flag --" + kebab(e.Key)
			case e.Key == "host" && hostEnv:
				e.Source = "env " + EnvHost
			case e.Key == "redis_url" && fromEnv:
				e.Source = "env " + EnvRedisURL
			case e.Key == "redis_sentinel_password" && sentEnv:
				e.Source = "env " + EnvSentinelPassword
			case f.path != "" && e.entry > 0:
				e.File, e.Line = f.path, lineOfEntry(src, "periodic", e.entry, e.entryKey)
			case f.path != "":
				e.File, e.Line = f.path, lineOf(src, e.Key)
			}
		}
		return nil, err
	}
	return &c, nil
}

func readErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// decode reads src strictly: an unknown key or a wrong type is an *Error.
func decode(path string, src []byte, c *Config) error {
	d := toml.NewDecoder(bytes.NewReader(src))
	d.DisallowUnknownFields()
	err := d.Decode(c)
	if err == nil {
		return nil
	}
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) && len(sm.Errors) > 0 {
		de := sm.Errors[0]
		row, _ := de.Position()
		return &Error{File: path, Line: row, Key: strings.Join(de.Key(), "."), Msg: "unknown key" + hintKey(de.Key())}
	}
	// Type mistakes read as the other config errors: want this, got that.
	if e := typeError(src); e != nil {
		e.File = path
		return e
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		k := strings.Join(de.Key(), ".")
		if k == "" {
			k = keyAtLine(src, row)
		}
		return &Error{File: path, Line: row, Key: k, Msg: strings.TrimPrefix(de.Error(), "toml: ")}
	}
	return &Error{File: path, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// typeError finds the first key, in file order, whose value has the wrong
// type for it, or a duration that does not parse: "want an integer, got
// string "4"". It returns nil when src does not parse or every type is right.
func typeError(src []byte) *Error {
	var doc map[string]any
	if toml.Unmarshal(src, &doc) != nil {
		return nil
	}
	var first *Error
	forEachKey(&Config{}, func(k key) {
		v, ok := doc[k.name]
		if !ok {
			return
		}
		var msg string
		switch k.ptr.(type) {
		case *int:
			if _, ok := v.(int64); !ok {
				msg = "want an integer, got " + describe(v)
			}
		case *string:
			if _, ok := v.(string); !ok {
				msg = "want a string, got " + describe(v)
			}
		case *bool:
			if _, ok := v.(bool); !ok {
				msg = "want true or false, got " + describe(v)
			}
		case *[]string:
			if a, ok := v.([]any); !ok {
				msg = `want an array of strings such as ["10.0.0.1:26379"], got ` + describe(v)
			} else {
				for _, x := range a {
					if _, ok := x.(string); !ok {
						msg = `want an array of strings such as ["10.0.0.1:26379"], got an element ` + describe(x)
						break
					}
				}
			}
		case *Duration:
			var d Duration
			if s, ok := v.(string); !ok {
				msg = `want a duration such as "90s" or "5m", got ` + describe(v)
			} else if err := d.Set(s); err != nil {
				msg = err.Error()
			}
		}
		if line := lineOf(src, k.name); msg != "" && (first == nil || line < first.Line) {
			first = &Error{Line: line, Key: k.name, Msg: msg}
		}
	})
	return first
}

// describe names a decoded TOML value's type, and the value when it is short.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a date or time (%v)", v)
}

// hintKey suggests the right spelling when a flag-style key was used in the file.
func hintKey(k []string) string {
	if len(k) != 1 {
		return ""
	}
	snake := strings.ReplaceAll(k[0], "-", "_")
	found := ""
	forEachKey(&Config{}, func(kk key) {
		if kk.name == snake && snake != k[0] {
			found = " (did you mean " + snake + "?)"
		}
	})
	return found
}

var keyLine = regexp.MustCompile(`^\s*"?([A-Za-z0-9_-]+)"?\s*=`)

// lineOf returns the 1-based line that sets a top-level key, or 0.
func lineOf(src []byte, name string) int {
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		if m := keyLine.FindSubmatch(sc.Bytes()); m != nil && string(m[1]) == name {
			return n
		}
	}
	return 0
}

var tableLine = regexp.MustCompile(`^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]`)

// lineOfEntry returns the 1-based line that sets key in the n-th (1-based)
// [[table]] of src, or that table's header line when it does not set it.
func lineOfEntry(src []byte, table string, n int, name string) int {
	sc := bufio.NewScanner(bytes.NewReader(src))
	seen, header := 0, 0
	for l := 1; sc.Scan(); l++ {
		if m := tableLine.FindSubmatch(sc.Bytes()); m != nil {
			if seen == n && header > 0 {
				return header
			}
			if string(m[1]) == table && bytes.Contains(sc.Bytes(), []byte("[[")) {
				seen++
				if seen == n {
					header = l
				}
			}
			continue
		}
		if m := keyLine.FindSubmatch(sc.Bytes()); seen == n && header > 0 && m != nil && string(m[1]) == name {
			return l
		}
	}
	return header
}

func keyAtLine(src []byte, row int) string {
	lines := bytes.Split(src, []byte("\n"))
	if row < 1 || row > len(lines) {
		return ""
	}
	if m := keyLine.FindSubmatch(lines[row-1]); m != nil {
		return string(m[1])
	}
	return ""
}

type key struct {
	name, flag, help, group string
	index                   int
	ptr                     any
}

// forEachKey calls fn for every TOML key of c, in declaration order.
func forEachKey(c *Config, fn func(key)) {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Tag.Get("group") == "" {
			continue // a table ([[periodic]]): no flag, checked apart
		}
		name := sf.Tag.Get("toml")
		fn(key{name: name, flag: kebab(name), help: sf.Tag.Get("help"), group: sf.Tag.Get("group"), index: i, ptr: v.Field(i).Addr().Interface()})
	}
}

func kebab(s string) string { return strings.ReplaceAll(s, "_", "-") }
