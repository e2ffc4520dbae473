#!/usr/bin/env bash
# Start the virtual sound cards the device tests run on (CI, or a dev box without hardware).
#
#   JACK   jackd on its dummy backend (no hardware, 48 kHz, 256-frame period) with two
#          loopback ports (`-L 2`): whatever a client writes to loopback:playback_N comes
#          back on loopback:capture_N one period later. PortAudio's JACK host API lists it
#          as the device "loopback" (sample-exact round trip = one period = 5.333 ms).
#   Pulse  a PulseAudio daemon for this user (no dbus, no X, never exits when idle) with
#          three null sinks used as cables: rig_cable (loopback for `rig calibrate`),
#          rig_uplink (rig -> system under test) and rig_downlink (system -> rig). PortAudio
#          has no PulseAudio host API in 19.6; it reaches Pulse through its ALSA host API and
#          the alsa "pulse" plugin (libasound2-plugins). This script writes ALSA pcms named
#          rig_cable, rig_uplink, rig_downlink (play into the sink, record its monitor), so
#          they show up in `rig devices` under ALSA; "pulse"/"default" use the default sink
#          (rig_cable) and its monitor.
#
# Idempotent: a server that is already up is left alone. State (logs, pid files, env) goes
# to $RIG_AUDIO_DIR (default /tmp/rig-audio). `source $RIG_AUDIO_DIR/env` gives PULSE_SERVER
# for clients that do not find the default socket. Stop with scripts/ci/audio-down.sh.
# Needs: pulseaudio pulseaudio-utils jackd2 libasound2-plugins libportaudio2.
set -euo pipefail

STATE="${RIG_AUDIO_DIR:-/tmp/rig-audio}"
RATE="${RIG_AUDIO_RATE:-48000}"
PERIOD="${RIG_JACK_PERIOD:-256}"
ALSA_CONF="${RIG_ALSA_CONF:-/etc/alsa/conf.d/60-rig-audio.conf}"
export JACK_NO_START_SERVER=1
mkdir -p "$STATE"

log() { echo "audio-up: $*" >&2; }

wait_for() {  # wait_for SECONDS CMD...: poll until CMD succeeds
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then return 1; fi
        sleep 0.2
    done
}

# --- JACK -----------------------------------------------------------------------------
if jack_lsp >/dev/null 2>&1; then
    log "jackd already running"
else
    # Servers killed without a clean exit leave their entries in JACK's shared-memory
    # registry; once it is full, no new server starts ("Too many servers already active").
    # With no jackd running at all, nothing in it is alive: clear it.
    if ! pgrep -x jackd >/dev/null 2>&1; then
        rm -f /dev/shm/jack-* /dev/shm/jack_* /dev/shm/jack-shm-registry 2>/dev/null || true
    fi
    # Real-time scheduling (SCHED_FIFO 10, JACK's default) where the machine grants it: without
    # it every busy process on a shared 2-core box costs the loopback xruns (measured: 8-28
    # per rollout with two CPU hogs, 0 with -R). --no-realtime where it is not granted.
    # -L 2: two loopback ports (the long form --loopback segfaults in jackd2 1.9.21).
    # -p is the period in frames; -w (µs between cycles) must match it.
    if chrt -f 10 true 2>/dev/null; then rt_flags=(-R -P 10); else rt_flags=(--no-realtime); fi
    wait_us=$((PERIOD * 1000000 / RATE))
    nohup jackd "${rt_flags[@]}" -L 2 -d dummy -r "$RATE" -p "$PERIOD" -w "$wait_us" \
        >"$STATE/jackd.log" 2>&1 </dev/null &
    echo $! >"$STATE/jackd.pid"
    if ! wait_for 10 jack_lsp loopback:capture_1; then
        log "jackd did not come up; log follows"; cat "$STATE/jackd.log" >&2; exit 1
    fi
    log "jackd up (pid $(cat "$STATE/jackd.pid"), dummy ${RATE} Hz, period ${PERIOD}, ${rt_flags[*]})"
fi
jack_lsp loopback:capture_1 >/dev/null || { log "jackd has no loopback ports"; exit 1; }

# --- PulseAudio -----------------------------------------------------------------------
cat >"$STATE/pulse.pa" <<PA
load-module module-native-protocol-unix auth-anonymous=1
load-module module-null-sink sink_name=rig_cable rate=$RATE channels=2 sink_properties=device.description=rig_cable
load-module module-null-sink sink_name=rig_uplink rate=$RATE channels=2 sink_properties=device.description=rig_uplink
load-module module-null-sink sink_name=rig_downlink rate=$RATE channels=2 sink_properties=device.description=rig_downlink
set-default-sink rig_cable
set-default-source rig_cable.monitor
PA
if pulseaudio --check >/dev/null 2>&1; then
    log "pulseaudio already running"
else
    # Runs as root in CI: --system=false keeps it a per-user daemon (no system bus, no
    # pulse user); -n skips default.pa (no hardware/dbus/X modules); -F loads ours.
    nohup pulseaudio --system=false --exit-idle-time=-1 -n -F "$STATE/pulse.pa" \
        --daemonize=no --realtime=false --high-priority=false --log-target=stderr \
        >"$STATE/pulseaudio.log" 2>&1 </dev/null &
    echo $! >"$STATE/pulseaudio.pid"
    if ! wait_for 10 pactl info; then
        log "pulseaudio did not come up; log follows"; cat "$STATE/pulseaudio.log" >&2; exit 1
    fi
    log "pulseaudio up (pid $(cat "$STATE/pulseaudio.pid"))"
fi
for sink in rig_cable rig_uplink rig_downlink; do
    if ! pactl list short sinks | grep -q "^[0-9]*[[:space:]]$sink[[:space:]]"; then
        pactl load-module module-null-sink sink_name="$sink" rate="$RATE" channels=2 \
            sink_properties=device.description="$sink" >/dev/null
    fi
done
server="$(pactl info | sed -n 's/^Server String: //p')"
echo "export PULSE_SERVER=unix:$server" >"$STATE/env"

# --- ALSA names for the Pulse cables (what PortAudio lists) ---------------------------
if mkdir -p "$(dirname "$ALSA_CONF")" 2>/dev/null && : >"$ALSA_CONF.tmp" 2>/dev/null; then
    for sink in rig_cable rig_uplink rig_downlink; do
        cat >>"$ALSA_CONF.tmp" <<ALSA
pcm.$sink {
    type asym
    playback.pcm { type pulse device "$sink" }
    capture.pcm { type pulse device "$sink.monitor" }
    hint { show on description "rig: PulseAudio null sink $sink (capture = its monitor)" }
}
ALSA
    done
    mv "$ALSA_CONF.tmp" "$ALSA_CONF"
    log "ALSA pcms rig_cable, rig_uplink, rig_downlink in $ALSA_CONF"
else
    log "cannot write $ALSA_CONF: only the ALSA devices pulse/default reach PulseAudio"
fi
log "ready; state in $STATE"
