#!/usr/bin/env bash
# Stop what scripts/ci/audio-up.sh started (only servers whose pid it recorded).
set -uo pipefail

STATE="${RIG_AUDIO_DIR:-/tmp/rig-audio}"
ALSA_CONF="${RIG_ALSA_CONF:-/etc/alsa/conf.d/60-rig-audio.conf}"

stop() {  # stop NAME: kill the pid in $STATE/NAME.pid, wait up to 5 s
    local pidfile="$STATE/$1.pid" pid
    [[ -f $pidfile ]] || return 0
    pid="$(cat "$pidfile")"
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        echo "audio-down: stopped $1 (pid $pid)" >&2
    fi
    rm -f "$pidfile"
}

stop pulseaudio
stop jackd
rm -f "$ALSA_CONF" "$STATE/env"
