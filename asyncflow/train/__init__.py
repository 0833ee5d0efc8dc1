"""``af.train``: optimizers, checkpoints (Saver) and meta graphs, as in TF1's ``tf.train``."""
from asyncflow.train.meta_graph import export_meta_graph, read_graph, write_graph  # noqa: F401
from asyncflow.train.saver import (  # noqa: F401
    CheckpointState, Saver, checkpoint_exists, get_checkpoint_state, import_meta_graph,
    latest_checkpoint,
)
from asyncflow.train.checkpoint_utils import list_variables, load_variable  # noqa: F401
from asyncflow.train.optimizer import Optimizer  # noqa: F401
from asyncflow.train.optimizers import (  # noqa: F401
    AdadeltaOptimizer, AdagradDAOptimizer, AdagradOptimizer, AdamOptimizer,
    GradientDescentOptimizer, MomentumOptimizer, ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer, RMSPropOptimizer, FtrlOptimizer,
)
from asyncflow.train.training_util import (  # noqa: F401
    create_global_step, get_global_step, get_or_create_global_step,
)
from asyncflow.train.input import (  # noqa: F401  (input pipelines)
    batch, input_producer, limit_epochs, range_input_producer, shuffle_batch,
    slice_input_producer, string_input_producer,
)
from asyncflow.train.queue_runner import (  # noqa: F401  (queue runners)
    Coordinator, QueueRunner, add_queue_runner, start_queue_runners,
)
from asyncflow.train.hooks import (  # noqa: F401  (hooks of the training loop)
    CheckpointSaverHook, LoggingTensorHook, NanLossDuringTrainingError, NanTensorHook,
    SecondOrStepTimer, SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues,
    StepCounterHook, StopAtStepHook,
)
from asyncflow.train.monitored_session import (  # noqa: F401  (training loop, recovery)
    MonitoredSessionStatistics, MonitoredTrainingSession, Scaffold,
)
from asyncflow.train.device_setter import replica_device_setter  # noqa: F401
from asyncflow.train.learning_rate_decay import (  # noqa: F401  (learning-rate schedules)
    cosine_decay, cosine_decay_restarts, exponential_decay, inverse_time_decay,
    linear_cosine_decay, natural_exp_decay, noisy_linear_cosine_decay, piecewise_constant,
    piecewise_constant_decay, polynomial_decay,
)
from asyncflow.train.moving_averages import ExponentialMovingAverage  # noqa: F401,E402
