"""TF1's dense RMSProp, Adam and momentum CPU functors (``training_ops.cc``: ``ms += (grad^2 -
ms) * (1 - rho)``, ``mg += (grad - mg) * (1 - rho)``, ``mom = mom * momentum + grad * lr /
sqrt(...)``, ``var -= mom``; ``m += (grad - m) * (1 - beta1)``, ``v += (grad^2 - v) * (1 -
beta2)``; ``accum = accum * momentum + grad``, ``var -= grad * lr + accum * momentum * lr``
with Nesterov) as whole-array numpy expressions in their order, the references those
kernels are compared with bit for bit (``test_optimizer_kernels.py``);
``test_rmsprop_tf1.py`` and ``test_adam_momentum_tf1.py`` check the kernels against TF1
itself. The other applies keep the kernels of ``optimizer_kernels_before.py`` as
references."""
import optimizer_kernels_before as before  # same folder


def _apply_momentum(ctx, var, accum, lr, grad, momentum):
    value = before._read(ctx, var, grad)
    lr, momentum = before._scalar(lr, value), before._scalar(momentum, value)
    new_accum = accum.assign(accum.read() * momentum + grad, fresh=True)
    if ctx.attrs["use_nesterov"]:
        return (var.assign(value - (grad * lr + new_accum * momentum * lr), fresh=True),)
    return (var.assign(value - new_accum * lr, fresh=True),)


def _apply_adam(ctx, var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad):
    xp = ctx.xp
    value = before._read(ctx, var, grad)
    beta1, beta2 = before._scalar(beta1, value), before._scalar(beta2, value)
    alpha = before._scalar(lr * xp.sqrt(1 - beta2_power) / (1 - beta1_power), value)
    old_m, old_v = m.read(), v.read()
    new_m = m.assign(old_m + (grad - old_m) * (1 - beta1), fresh=True)
    new_v = v.assign(old_v + (xp.square(grad) - old_v) * (1 - beta2), fresh=True)
    if ctx.attrs["use_nesterov"]:
        step = (grad * (1 - beta1) + beta1 * new_m) * alpha
    else:
        step = new_m * alpha
    epsilon = before._scalar(epsilon, value)
    return (var.assign(value - step / (xp.sqrt(new_v) + epsilon), fresh=True),)


def _apply_rms_prop(ctx, var, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = before._read(ctx, var, grad)
    rho, lr, momentum, epsilon = (before._scalar(s, value) for s in (rho, lr, momentum, epsilon))
    old_ms = ms.read()
    new_ms = ms.assign(old_ms + (xp.square(grad) - old_ms) * (1 - rho), fresh=True)
    new_mom = mom.assign(mom.read() * momentum + grad * lr / xp.sqrt(new_ms + epsilon),
                         fresh=True)
    return (var.assign(value - new_mom, fresh=True),)


def _apply_centered_rms_prop(ctx, var, mg, ms, mom, lr, rho, momentum, epsilon, grad):
    xp = ctx.xp
    value = before._read(ctx, var, grad)
    rho, lr, momentum, epsilon = (before._scalar(s, value) for s in (rho, lr, momentum, epsilon))
    old_ms, old_mg = ms.read(), mg.read()
    new_ms = ms.assign(old_ms + (xp.square(grad) - old_ms) * (1 - rho), fresh=True)
    new_mg = mg.assign(old_mg + (grad - old_mg) * (1 - rho), fresh=True)
    denominator = xp.sqrt((new_ms - xp.square(new_mg)) + epsilon)
    new_mom = mom.assign(mom.read() * momentum + grad * lr / denominator, fresh=True)
    return (var.assign(value - new_mom, fresh=True),)
