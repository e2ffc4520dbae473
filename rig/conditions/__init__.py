"""Input conditions: how the user sounds to the system (level, noise, line).

`spec` parses what is asked (scenario `condition` tables, `rig run --condition`), `plan`
renders every conditioned turn before anything streams (`apply_conditions`), `hook` is the
uplink frame hook that plays the renderings and the noise between turns on the session
timeline. Levels come from numpy (RMS, peak) and pyloudnorm (BS.1770 loudness); pink noise
from colorednoise; the phone line from soxr (rate changes), scipy.signal (the band-pass)
and libsndfile through soundfile (G.711 mu-law). docs/scenarios.md, "Conditions".
"""

from rig.conditions.plan import ConditionPlan, apply_conditions
from rig.conditions.spec import Condition, merge, parse, parse_cli

__all__ = ["Condition", "ConditionPlan", "apply_conditions", "merge", "parse", "parse_cli"]
