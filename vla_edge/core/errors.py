"""Named exceptions. Each message names the field, the value and the bound."""


class VlaEdgeError(Exception):
    """Base class of every error vla_edge raises on purpose."""


class ConfigError(VlaEdgeError):
    """A configuration file or field is invalid."""


class RemovedFeatureError(ConfigError):
    """A config or checkpoint sets a removed field to other than the value the code hard-wires."""


class FlatSafetyLimitsError(ConfigError):
    """Safety limits given as parallel lists (the old form): they are keyed per joint now."""


class MissingJointLimitsError(ConfigError):
    """A joint has no limits in the safety configuration."""


class DuplicateKeyError(ConfigError):
    """A YAML mapping names the same key twice (YAML would keep the last silently)."""


class ActionSpaceError(ConfigError):
    """A policy's action space is malformed, or the robot cannot execute it."""


class StateSpaceError(ConfigError):
    """A policy's state space is malformed, or the robot cannot observe it."""


class ManifestMismatchError(VlaEdgeError):
    """An exported artifact's manifest does not match what it is asked to do."""


class InvalidObservationError(VlaEdgeError):
    """An observation has the wrong shape, dtype, camera set or a non-finite value."""


class InstructionRefusedError(InvalidObservationError):
    """The policy cannot take this instruction (empty once tokenised, unknown words, too long)."""

    reason = "instruction_refused"


class InvalidActionError(VlaEdgeError):
    """An action given to the simulator is of the wrong dimension or non-finite."""


class InvalidCommandError(VlaEdgeError):
    """A joint command given to the safety layer is malformed or non-finite."""


class ChunkRejectedError(VlaEdgeError):
    """Base class of the reasons an action chunk is refused by the controller.

    ``reason`` is a short stable key used for counters and diagnostics.
    """

    reason = "rejected"


class EmptyChunkError(ChunkRejectedError):
    """The chunk has no steps."""

    reason = "empty"


class NonFiniteChunkError(ChunkRejectedError):
    """The chunk holds NaN or inf."""

    reason = "non_finite"


class NonMonotonicChunkError(ChunkRejectedError):
    """The chunk's step times do not strictly increase."""

    reason = "non_monotonic"


class JointMismatchError(ChunkRejectedError):
    """The chunk's joint names or action dimension differ from the controller's."""

    reason = "joint_mismatch"


class StaleChunkError(ChunkRejectedError):
    """The chunk's observation is older than ``max_chunk_age_s``."""

    reason = "stale"


class NonFiniteClockError(ChunkRejectedError):
    """The controller's ``now_s`` is NaN or infinite: no chunk can be placed in time."""

    reason = "non_finite_clock"


class FutureChunkError(ChunkRejectedError):
    """The chunk's observation stamp lies in the future beyond the clock tolerance."""

    reason = "future"


class ProtocolError(VlaEdgeError):
    """A wire message (msgpack with numpy arrays) is malformed or breaks a decoding limit."""


class MessageTooLargeError(ProtocolError):
    """A wire message is larger than ``max_message_bytes``."""


class RemoteRunnerError(VlaEdgeError):
    """A remote policy server could not produce a chunk (connection, protocol or server error)."""


class RemoteConnectionError(RemoteRunnerError):
    """The remote policy server is unreachable, refused the connection or closed it."""


class RemoteTimeoutError(RemoteRunnerError, TimeoutError):
    """The remote policy server did not answer within ``remote_timeout_s``."""


class RemoteServerError(RemoteRunnerError):
    """The remote policy server answered with an error reply instead of actions."""


class OutOfOrderChunkError(ChunkRejectedError):
    """The chunk's observation is older than that of a chunk already accepted."""

    reason = "out_of_order"


class OutOfLimitsChunkError(ChunkRejectedError):
    """A step of the chunk lies outside a joint's position limits."""

    reason = "out_of_limits"


class CommandJointMismatchError(InvalidCommandError):
    """A joint command's names or dimension differ from the safety layer's joints."""

    reason = "joint_mismatch"


class NonFiniteCommandError(InvalidCommandError):
    """A joint command holds NaN or inf (positions or stamp)."""

    reason = "non_finite"


class CommandOutOfLimitsError(InvalidCommandError):
    """A joint command lies outside the hard position limits."""

    reason = "out_of_limits"


class StaleCommandError(InvalidCommandError):
    """A joint command is older than ``command_timeout_s`` or predates a reset."""

    reason = "stale"


class WatchdogError(VlaEdgeError):
    """A watchdog heartbeat is unknown or configured with an invalid timeout."""


class CheckpointError(VlaEdgeError):
    """A policy checkpoint is missing, unreadable or lacks a required field."""


class UnknownTaskError(VlaEdgeError):
    """A task name is not part of the requested suite."""


class InitStateOutOfRangeError(VlaEdgeError):
    """An init-state id lies outside the task's fixed initial states."""


class AssetNotFoundError(VlaEdgeError):
    """A simulator asset (MJCF) could not be found in the source tree or share/."""


class DatasetError(VlaEdgeError):
    """A demonstration dataset is missing, empty or does not match the model's shapes."""


class CheckpointKeysError(CheckpointError):
    """A checkpoint's tensors do not fit the model: missing, unexpected or mis-shaped keys."""


class UnknownArchitectureError(CheckpointError):
    """A checkpoint or policy directory names an architecture this package does not build."""


class NormStatsError(CheckpointError):
    """Normalisation statistics are absent, unreadable, non-finite or of negative width."""


class TokenizerMismatchError(CheckpointError):
    """A tokenizer is unreadable, or its vocabulary does not fit the model's embedding table."""


class CameraMapError(ConfigError):
    """A camera map names an image slot the model lacks or a camera the robot lacks."""


class PolicyDirError(ConfigError):
    """A policy directory lacks a file, or its ``policy.yaml`` is malformed."""


class OutputExistsError(VlaEdgeError, FileExistsError):
    """An output directory exists and overwriting it was not asked for (``--force``)."""


class ParityGateError(VlaEdgeError):
    """An export's actions differ from eager torch's by more than the bound the user set."""


class DeviceUnavailableError(ConfigError):
    """A runner was asked for a device (``cuda``, ``cuda:1``) this machine does not have."""


class ExecutionProviderError(ConfigError):
    """An ONNX Runtime execution provider was asked for that this onnxruntime build lacks."""
