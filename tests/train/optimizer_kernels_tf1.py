"""TF1's dense RMSProp CPU functors (``training_ops.cc``: ``ms += (grad^2 - ms) * (1 - rho)``,
``mg += (grad - mg) * (1 - rho)``, ``mom = mom * momentum + grad * lr / sqrt(...)``,
``var -= mom``) as whole-array numpy expressions in their order, the references the rebuilt
RMSProp kernels are compared with bit for bit (``test_optimizer_kernels.py``);
``test_rmsprop_tf1.py`` checks the kernels against TF1 itself. The other applies keep the
kernels of ``optimizer_kernels_before.py`` as references."""
import optimizer_kernels_before as before  # same folder


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
