"""The TF1 optimizers, each one fused ``Apply*`` op per variable (see ops/training.py).

Update rules (``g`` the gradient, ``lr`` the learning rate):
- GradientDescent: ``var -= lr * g``.
- Momentum: ``accum = momentum * accum + g; var -= lr * accum`` (Nesterov:
  ``var -= lr * g + lr * momentum * accum``).
- Adam: ``m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``; the powers ``b1^t``, ``b2^t``
  are non-slot variables advanced after all updates of a step.
- Adagrad: ``accum += g^2; var -= lr g / sqrt(accum)``.
- RMSProp: ``ms = decay ms + (1 - decay) g^2; mom = momentum mom + lr g / sqrt(ms + eps);
  var -= mom`` (centered: ``mg = decay mg + (1 - decay) g`` and ``ms - mg^2`` under the root).
- Ftrl: TF1's FTRL-Proximal with l1, l2 and l2 shrinkage (``ApplyFtrlV2``).
- Adadelta, ProximalGradientDescent, ProximalAdagrad, AdagradDA: TF1's rules
  (``kernels/training_proximal.py``).

A sparse gradient (``IndexedSlices``) is applied by the ``SparseApply*`` form of the same rule
on the touched rows (gradient descent: ``scatter_sub``), where the variable lives.
"""
from __future__ import annotations

from asyncflow.dtypes import float32
from asyncflow.ops.control import group
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor
from asyncflow.ops.math import cast, maximum
from asyncflow.ops.state import scatter_sub
from asyncflow.ops.training import apply_update
from asyncflow.train.optimizer import Optimizer


class GradientDescentOptimizer(Optimizer):
    """Plain gradient descent: ``var -= learning_rate * grad``."""

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        return apply_update("ApplyGradientDescent", [var._ref()], [lr, grad])

    def _apply_sparse_duplicate_indices(self, grad, var):
        # TF1: scatter_sub adds up repeated rows, so no dedup is needed.
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        return scatter_sub(var, grad.indices, grad.values * lr)


class MomentumOptimizer(Optimizer):
    """Momentum (optionally Nesterov); slot ``"momentum"`` holds the accumulator."""

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, "momentum")

    def _apply_dense(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        momentum = self._hyper(self._momentum, var.dtype, "momentum")
        accum = self.get_slot(var, "momentum")
        return apply_update("ApplyMomentum", [var._ref(), accum._ref()], [lr, grad, momentum],
                            use_nesterov=self._use_nesterov)

    def _apply_sparse(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        momentum = self._hyper(self._momentum, var.dtype, "momentum")
        accum = self.get_slot(var, "momentum")
        return apply_update("SparseApplyMomentum", [var._ref(), accum._ref()],
                            [lr, grad.values, grad.indices, momentum],
                            use_nesterov=self._use_nesterov)


class AdamOptimizer(Optimizer):
    """Adam (Kingma and Ba); slots ``"m"`` and ``"v"``, non-slots ``beta1_power``/``beta2_power``."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon

    def _create_slots(self, var_list):
        first = min(var_list, key=lambda v: v.name)
        self._non_slot("beta1_power", self._beta1, first)
        self._non_slot("beta2_power", self._beta2, first)
        for var in var_list:
            self._slot(var, "m")
            self._slot(var, "v")

    def _get_beta_accumulators(self, graph=None):
        """The beta powers of ``graph`` (default: the default graph), as TF1's."""
        if graph is None:
            from asyncflow.graph import get_default_graph
            graph = get_default_graph()
        return self._non_slots[("beta1_power", graph)], self._non_slots[("beta2_power", graph)]

    def _apply_dense(self, grad, var):
        return apply_update("ApplyAdam", self._refs(var), self._hypers(var) + [grad])

    def _apply_sparse(self, grad, var):
        return apply_update("SparseApplyAdam", self._refs(var),
                            self._hypers(var) + [grad.values, grad.indices])

    def _refs(self, var):
        return [var._ref(), self.get_slot(var, "m")._ref(), self.get_slot(var, "v")._ref()]

    def _hypers(self, var):
        """The update's scalar inputs, in ApplyAdam's order, in ``var``'s dtype."""
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph)
        dtype = var.dtype
        return [self._hyper(beta1_power, dtype, "beta1_power"),
                self._hyper(beta2_power, dtype, "beta2_power"),
                self._hyper(self._learning_rate, dtype, "learning_rate"),
                self._hyper(self._beta1, dtype, "beta1"),
                self._hyper(self._beta2, dtype, "beta2"),
                self._hyper(self._epsilon, dtype, "epsilon")]

    def _finish(self, update_ops, name):
        graph = update_ops[0].graph
        beta1_power, beta2_power = self._get_beta_accumulators(graph)
        with graph.control_dependencies([t.op for t in update_ops]):
            with graph.colocate_with(beta1_power.op):
                update_beta1 = beta1_power.assign(
                    beta1_power * self._hyper(self._beta1, beta1_power.dtype, "beta1"))
                update_beta2 = beta2_power.assign(
                    beta2_power * self._hyper(self._beta2, beta2_power.dtype, "beta2"))
        return group(*[t.op for t in update_ops], update_beta1, update_beta2, name=name)


class AdagradOptimizer(Optimizer):
    """Adagrad; slot ``"accumulator"`` starts at ``initial_accumulator_value``."""

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
                 name="Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: "
                             f"{initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, "accumulator", self._initial_accumulator_value)

    def _apply_dense(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        accum = self.get_slot(var, "accumulator")
        return apply_update("ApplyAdagrad", [var._ref(), accum._ref()], [lr, grad])

    def _apply_sparse(self, grad, var):
        lr = self._hyper(self._learning_rate, var.dtype, "learning_rate")
        accum = self.get_slot(var, "accumulator")
        return apply_update("SparseApplyAdagrad", [var._ref(), accum._ref()],
                            [lr, grad.values, grad.indices])


class RMSPropOptimizer(Optimizer):
    """RMSProp; slots ``"rms"`` (starts at 1), ``"momentum"`` and, when centered, ``"mg"``."""

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
                 use_locking=False, centered=False, name="RMSProp"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._decay, self._momentum, self._epsilon = decay, momentum, epsilon
        self._centered = bool(centered)

    def _create_slots(self, var_list):
        for var in var_list:  # TF1's order, so the slot variables' names are TF1's
            self._slot(var, "rms", 1.0)
            if self._centered:
                self._slot(var, "mg")
            self._slot(var, "momentum")

    def _apply_dense(self, grad, var):
        return self._apply(var, [grad], "")

    def _apply_sparse(self, grad, var):
        return self._apply(var, [grad.values, grad.indices], "Sparse")

    def _apply(self, var, grad, prefix):
        dtype = var.dtype
        values = [self._hyper(self._learning_rate, dtype, "learning_rate"),
                  self._hyper(self._decay, dtype, "decay"),
                  self._hyper(self._momentum, dtype, "momentum"),
                  self._hyper(self._epsilon, dtype, "epsilon")] + grad
        rms, mom = self.get_slot(var, "rms")._ref(), self.get_slot(var, "momentum")._ref()
        if self._centered:
            mg = self.get_slot(var, "mg")._ref()
            return apply_update(prefix + "ApplyCenteredRMSProp", [var._ref(), mg, rms, mom],
                                values)
        return apply_update(prefix + "ApplyRMSProp", [var._ref(), rms, mom], values)


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013) as TF1's ``FtrlOptimizer``; slots ``"accum"``
    (starts at ``initial_accumulator_value``) and ``"linear"``.

    Raises:
        ValueError: on a positive ``learning_rate_power``, a negative initial accumulator or
            negative regularization strengths.
    """

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="Ftrl", accum_name=None, linear_name=None,
                 l2_shrinkage_regularization_strength=0.0, beta=None):
        super().__init__(use_locking, name)
        checks = (("initial_accumulator_value", initial_accumulator_value),
                  ("l1_regularization_strength", l1_regularization_strength),
                  ("l2_regularization_strength", l2_regularization_strength),
                  ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength))
        for what, value in checks:
            if not isinstance(value, (int, float)) or value < 0.0:
                raise ValueError(f"{what} {value} must be a non-negative number")
        if learning_rate_power > 0.0:
            raise ValueError(f"learning_rate_power {learning_rate_power} must be <= 0")
        self._learning_rate = learning_rate
        self._learning_rate_power = learning_rate_power
        self._initial_accumulator_value = initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._l2_shrinkage = l2_shrinkage_regularization_strength
        self._beta = 0.0 if beta is None else beta
        self._accum_name, self._linear_name = accum_name or "accum", linear_name or "linear"

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, self._accum_name, self._initial_accumulator_value)
            self._slot(var, self._linear_name)

    def _hypers(self, var):
        dtype = var.dtype
        lr = self._hyper(self._learning_rate, dtype, "learning_rate")
        l2 = self._hyper(self._l2, dtype, "l2_regularization_strength")
        # TF1: l2 + beta / (2 lr), in float32, cast to the variable's dtype (a tensor beta
        # too: it has no truth value when the graph is built)
        if not isinstance(self._beta, (int, float)) or self._beta:
            key = ("adjusted_l2_regularization_strength", dtype)
            if key not in self._hyper_cache:
                lr32 = self._hyper(self._learning_rate, float32, "learning_rate")
                l2_32 = self._hyper(self._l2, float32, "l2_regularization_strength")
                beta = self._hyper(self._beta, float32, "beta")
                self._hyper_cache[key] = cast(
                    l2_32 + beta / (2.0 * maximum(lr32, 1e-36)), dtype)
            l2 = self._hyper_cache[key]
        return [lr,
                self._hyper(self._l1, dtype, "l1_regularization_strength"),
                l2,
                self._hyper(self._l2_shrinkage, dtype, "l2_shrinkage_regularization_strength"),
                self._hyper(self._learning_rate_power, dtype, "learning_rate_power")]

    def _refs(self, var):
        return [var._ref(), self.get_slot(var, self._accum_name)._ref(),
                self.get_slot(var, self._linear_name)._ref()]

    def _apply_dense(self, grad, var):
        return apply_update("ApplyFtrlV2", self._refs(var), [grad] + self._hypers(var))

    def _apply_sparse(self, grad, var):
        return apply_update("SparseApplyFtrlV2", self._refs(var),
                            [grad.values, grad.indices] + self._hypers(var))


class AdadeltaOptimizer(Optimizer):
    """Adadelta (Zeiler 2012) as TF1's; slots ``"accum"`` and ``"accum_update"``."""

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False,
                 name="Adadelta"):
        super().__init__(use_locking, name)
        self._learning_rate, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, "accum")
            self._slot(var, "accum_update")

    def _refs_hypers(self, var):
        dtype = var.dtype
        return ([var._ref(), self.get_slot(var, "accum")._ref(),
                 self.get_slot(var, "accum_update")._ref()],
                [self._hyper(self._learning_rate, dtype, "learning_rate"),
                 self._hyper(self._rho, dtype, "rho"),
                 self._hyper(self._epsilon, dtype, "epsilon")])

    def _apply_dense(self, grad, var):
        refs, hypers = self._refs_hypers(var)
        return apply_update("ApplyAdadelta", refs, hypers + [grad])

    def _apply_sparse(self, grad, var):
        refs, hypers = self._refs_hypers(var)
        return apply_update("SparseApplyAdadelta", refs, hypers + [grad.values, grad.indices])


class ProximalGradientDescentOptimizer(Optimizer):
    """Gradient descent with TF1's proximal l1/l2 step (FOBOS): no slots."""

    def __init__(self, learning_rate, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, use_locking=False,
                 name="ProximalGradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength

    def _hypers(self, var):
        dtype = var.dtype
        return [self._hyper(self._learning_rate, dtype, "learning_rate"),
                self._hyper(self._l1, dtype, "l1_regularization_strength"),
                self._hyper(self._l2, dtype, "l2_regularization_strength")]

    def _apply_dense(self, grad, var):
        return apply_update("ApplyProximalGradientDescent", [var._ref()],
                            self._hypers(var) + [grad])

    def _apply_sparse(self, grad, var):
        return apply_update("SparseApplyProximalGradientDescent", [var._ref()],
                            self._hypers(var) + [grad.values, grad.indices])


class ProximalAdagradOptimizer(ProximalGradientDescentOptimizer):
    """Adagrad with TF1's proximal l1/l2 step; slot ``"accumulator"`` starts at
    ``initial_accumulator_value``."""

    def __init__(self, learning_rate, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="ProximalAdagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: "
                             f"{initial_accumulator_value}")
        super().__init__(learning_rate, l1_regularization_strength, l2_regularization_strength,
                         use_locking, name)
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, "accumulator", self._initial_accumulator_value)

    def _apply_dense(self, grad, var):
        return apply_update("ApplyProximalAdagrad",
                            [var._ref(), self.get_slot(var, "accumulator")._ref()],
                            self._hypers(var) + [grad])

    def _apply_sparse(self, grad, var):
        return apply_update("SparseApplyProximalAdagrad",
                            [var._ref(), self.get_slot(var, "accumulator")._ref()],
                            self._hypers(var) + [grad.values, grad.indices])


class AdagradDAOptimizer(Optimizer):
    """Adagrad dual averaging (Duchi et al. 2011) as TF1's ``AdagradDAOptimizer``; slots
    ``"gradient_accumulator"`` (starts at 0) and ``"gradient_squared_accumulator"`` (starts at
    ``initial_gradient_squared_accumulator_value``).

    The variable becomes a closed form of the accumulators and of ``global_step`` (an int64
    tensor, usually the one ``minimize`` advances): each update reads it plus one, as TF1's.

    Raises:
        ValueError: on an initial squared accumulator that is not positive.
    """

    def __init__(self, learning_rate, global_step,
                 initial_gradient_squared_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="AdagradDA"):
        if initial_gradient_squared_accumulator_value <= 0.0:
            raise ValueError(f"initial_gradient_squared_accumulator_value must be positive: "
                             f"{initial_gradient_squared_accumulator_value}")
        if global_step is None:
            raise ValueError("AdagradDAOptimizer: global_step must be an int64 tensor (such "
                             "as af.train.get_or_create_global_step()), got None")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_gradient_squared_accumulator_value = \
            initial_gradient_squared_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._global_step = global_step
        self._global_step_on_worker = None

    def _create_slots(self, var_list):
        for var in var_list:
            self._slot(var, "gradient_accumulator")
            self._slot(var, "gradient_squared_accumulator",
                       self._initial_gradient_squared_accumulator_value)

    def _prepare(self):
        # TF1's ``_global_step_on_worker``: the step plus one, read once per apply_gradients.
        self._global_step_on_worker = identity(as_tensor(self._global_step)) + 1

    def _refs_hypers(self, var):
        dtype = var.dtype
        return ([var._ref(), self.get_slot(var, "gradient_accumulator")._ref(),
                 self.get_slot(var, "gradient_squared_accumulator")._ref()],
                [self._hyper(self._learning_rate, dtype, "learning_rate"),
                 self._hyper(self._l1, dtype, "l1_regularization_strength"),
                 self._hyper(self._l2, dtype, "l2_regularization_strength"),
                 identity(self._global_step_on_worker)])

    def _apply_dense(self, grad, var):
        refs, hypers = self._refs_hypers(var)
        return apply_update("ApplyAdagradDA", refs, [grad] + hypers)

    def _apply_sparse(self, grad, var):
        refs, hypers = self._refs_hypers(var)
        return apply_update("SparseApplyAdagradDA", refs, [grad.values, grad.indices] + hypers)
