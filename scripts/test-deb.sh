#!/usr/bin/env bash
# make test-deb (after make deb): lintian on both packages in dist/ (no error
# allowed), then the amd64 one installed with apt-get on this machine, its
# files checked, and purged again. Installs Debian's lintian and man-db when
# missing. Refuses to run where a baton package is already installed: it
# would take it away.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# Other apt-get runs (a test installing redis-server) may hold dpkg's lock.
apt=($sudo apt-get -y -qq -o DPkg::Lock::Timeout=300)

fail() {
	echo "test-deb: $*" >&2
	exit 1
}

missing=()
command -v lintian >/dev/null 2>&1 || missing+=(lintian)
command -v man >/dev/null 2>&1 || missing+=(man-db)
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian's ${missing[*]} to test the packages" >&2
	"${apt[@]}" update
	"${apt[@]}" install "${missing[@]}" >/dev/null
fi

debs=()
for arch in amd64 arm64; do
	found=(dist/baton_*_"$arch".deb)
	[ -f "${found[0]}" ] || fail "no dist/baton_*_$arch.deb: run make deb"
	[ ${#found[@]} -eq 1 ] || fail "more than one dist/baton_*_$arch.deb: run make deb"
	debs+=("${found[0]}")
done
deb=${debs[0]}

# Lintian: errors fail (lintian exits non-zero), warnings are shown. The
# package's own overrides (usr/share/lintian/overrides/baton) say why each
# tag it hides is expected.
for f in "${debs[@]}"; do
	echo "lintian $f" >&2
	lintian --fail-on error "$f" 2> >(grep -v 'running with root privileges' >&2) ||
		fail "lintian reports errors in $f"
	others=$(dpkg-deb -c "$f" | awk '$2 != "root/root"')
	[ -z "$others" ] || fail "$f has files not owned by root:"$'\n'"$others"
done

if dpkg-query -W -f='${Status}' baton 2>/dev/null | grep -q 'installed\|config-files'; then
	fail "a baton package is already installed here; remove it first (apt-get purge baton)"
fi
[ ! -e /usr/bin/baton ] || fail "/usr/bin/baton exists and belongs to no package; remove it first"

tmp=$(mktemp -d)
cleanup() {
	if dpkg-query -W -f='${Status}' baton 2>/dev/null | grep -q 'installed\|config-files'; then
		"${apt[@]}" purge baton >/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "apt-get install ./$deb" >&2
"${apt[@]}" install "./$deb" >/dev/null
[ "$(command -v baton)" = /usr/bin/baton ] || fail "baton is not /usr/bin/baton after installing: $(command -v baton)"
baton version
want=$(dpkg-deb -f "$deb" Version)
[ "$(dpkg-query -W -f='${Version}' baton)" = "$want" ] || fail "dpkg does not list baton $want"

page=$(man -w baton)
[ "$page" = /usr/share/man/man1/baton.1.gz ] || fail "man -w baton: $page"
man -P cat baton 2>/dev/null | grep -q 'queue workers from a crontab line' || fail "man baton shows no NAME line"

for f in /usr/share/bash-completion/completions/baton \
	/usr/share/zsh/vendor-completions/_baton \
	/usr/share/fish/vendor_completions.d/baton.fish \
	/lib/systemd/system/baton@.service /lib/systemd/system/baton@.timer \
	/etc/baton/example.toml /etc/cron.d/baton /usr/share/doc/baton/copyright \
	/usr/share/doc/baton/changelog.Debian.gz; do
	[ -s "$f" ] || fail "$f missing or empty"
done
bash -c 'source /usr/share/bash-completion/completions/baton && complete -p baton' >/dev/null ||
	fail "the bash completion does not register for baton"
conffiles=$(dpkg-query -W -f='${Conffiles}' baton)
for f in /etc/baton/example.toml /etc/cron.d/baton; do
	grep -q " $f " <<<"$conffiles" || fail "$f is not a conffile"
done

# The units: installed, valid, not enabled (systemd-analyze checks a copy
# under an instance name: a template alone is not a unit).
if command -v systemd-analyze >/dev/null; then
	cp /lib/systemd/system/baton@.service "$tmp/baton@check.service"
	cp /lib/systemd/system/baton@.timer "$tmp/baton@check.timer"
	out=$(systemd-analyze verify --man=no "$tmp/baton@check.timer" "$tmp/baton@check.service" 2>&1) ||
		fail "systemd-analyze verify: $out"
	[ -z "$out" ] || fail "systemd-analyze verify: $out"
fi
enabled=$(find /etc/systemd/system -name 'baton@*' 2>/dev/null)
[ -z "$enabled" ] || fail "the package enabled units: $enabled"

# The example config passes baton check, and so does the cron.d line once
# uncommented; as shipped, cron.d runs nothing.
baton check --config /etc/baton/example.toml >/dev/null || fail "baton check rejects /etc/baton/example.toml"
! grep -qv '^[[:space:]]*\(#\|$\)' /etc/cron.d/baton || fail "/etc/cron.d/baton has a line that is not commented out"
sed -e 's/^# \(\* \* \* \* \* \)/\1/' -e 's|/etc/baton/thumbs.toml|/etc/baton/example.toml|g' /etc/cron.d/baton |
	baton check --config /etc/baton/example.toml --crontab - >/dev/null ||
	fail "baton check rejects the cron.d line uncommented"

echo "apt-get remove baton, then purge" >&2
"${apt[@]}" remove baton >/dev/null
[ ! -e /usr/bin/baton ] || fail "/usr/bin/baton left after apt-get remove"
[ -e /etc/baton/example.toml ] || fail "apt-get remove took the conffile /etc/baton/example.toml"
"${apt[@]}" purge baton >/dev/null
for f in /usr/bin/baton /etc/baton /etc/cron.d/baton /lib/systemd/system/baton@.service /usr/share/doc/baton; do
	[ ! -e "$f" ] || fail "$f left after apt-get purge"
done
! dpkg-query -W -f='${Status}' baton 2>/dev/null | grep -q 'installed\|config-files' || fail "dpkg still lists baton after purge"
echo "test-deb: ok: lintian clean of errors, installed, checked and purged $deb" >&2
