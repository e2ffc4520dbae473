"""A real pipecat bot for the rig's tests (run with an interpreter that has pipecat-ai).

Pipeline: WebSocket server transport (ProtobufFrameSerializer, 16 kHz) -> Silero VAD
(VADParams.stop_secs from argv) -> on VADUserStoppedSpeakingFrame push `reply_s` of a
520 Hz tone as OutputAudioRawFrame -> transport output. No STT/LLM/TTS: the reply is the
part of a cascade whose timing the test can predict (VAD stop time + transport pacing).

    python pipecat_bot.py PORT STOP_SECS [REPLY_S] [HOST] [TRUTH_LOG] [rtvi]

TRUTH_LOG (JSON lines on CLOCK_MONOTONIC, shared by every network namespace): `audio_in`
for each audio message as the serializer decodes it (its arrival, message by message) and
`audio_out` as each audio frame is serialized for the socket (a reply starts after a gap).

With `rtvi` (a word anywhere after STOP_SECS): an RTVIProcessor in the pipeline and an
RTVIObserver with raw VAD messages on, as a bot author would configure it, so the client
hears `vad-user-stopped-speaking`; the bot then prints `vad_stop <CLOCK_MONOTONIC ns>` when
its VAD decides (the test's truth).
"""

import asyncio
import json
import sys
import time

import numpy as np
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    InputAudioRawFrame,
    OutputAudioRawFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.runner import PipelineRunner
from pipecat.pipeline.task import PipelineParams, PipelineTask
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.protobuf import ProtobufFrameSerializer
from pipecat.transports.websocket.server import WebsocketServerParams, WebsocketServerTransport

RATE = 16_000


class ToneReply(FrameProcessor):
    def __init__(self, reply_s: float) -> None:
        super().__init__()
        t = np.arange(int(reply_s * RATE)) / RATE
        self.audio = (np.sin(2 * np.pi * 520 * t) * 0.3 * 32767).astype("<i2").tobytes()

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            print(f"vad_stop {time.monotonic_ns()}", flush=True)
            await self.push_frame(OutputAudioRawFrame(self.audio, RATE, 1))


class TruthSerializer(ProtobufFrameSerializer):
    """The bot's own stamps: each audio message in, each audio frame out."""

    def __init__(self, path: str | None) -> None:
        super().__init__()
        self.log = open(path, "a", buffering=1) if path else None  # noqa: SIM115

    def _write(self, ev: str) -> None:
        if self.log is not None:
            self.log.write(json.dumps({"ev": ev, "t_ns": time.monotonic_ns()}) + "\n")

    async def deserialize(self, data):
        frame = await super().deserialize(data)
        if isinstance(frame, InputAudioRawFrame):
            self._write("audio_in")
        return frame

    async def serialize(self, frame):
        if isinstance(frame, OutputAudioRawFrame):
            self._write("audio_out")
        return await super().serialize(frame)


async def main() -> None:
    rtvi = "rtvi" in sys.argv[3:]
    argv = [a for a in sys.argv if a != "rtvi"]
    port, stop_secs = int(argv[1]), float(argv[2])
    reply_s = float(argv[3]) if len(argv) > 3 else 0.8
    host = argv[4] if len(argv) > 4 else "127.0.0.1"
    truth = argv[5] if len(argv) > 5 else None
    transport = WebsocketServerTransport(
        params=WebsocketServerParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=RATE,
            audio_out_sample_rate=RATE,
            serializer=TruthSerializer(truth),
        ),
        host=host,
        port=port,
    )
    vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=stop_secs)))
    params = PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE)
    if rtvi:
        from pipecat.processors.frameworks.rtvi import (
            RTVIObserver,
            RTVIObserverParams,
            RTVIProcessor,
        )

        processor = RTVIProcessor()
        stages = [transport.input(), processor, vad, ToneReply(reply_s), transport.output()]
        observer = RTVIObserver(
            processor, params=RTVIObserverParams(vad_user_speaking_enabled=True)
        )
        task = PipelineTask(Pipeline(stages), params=params, observers=[observer])
    else:
        pipeline = Pipeline([transport.input(), vad, ToneReply(reply_s), transport.output()])
        task = PipelineTask(pipeline, params=params)
    print("bot starting", flush=True)
    await PipelineRunner(handle_sigint=True).run(task)


if __name__ == "__main__":
    asyncio.run(main())
