"""Control flow: the paper's primitives, their contexts and TF1's builders ``cond`` and ``case``.

Theory of operation:
- Primitives (all registered with ``control_flow=True``, so the executor runs frames):
  ``Switch(data, pred)`` forwards ``data`` to output 1 when ``pred`` is true, else to output 0;
  the other output is *dead*. ``Merge(inputs)`` forwards its first live input and that input's
  index. ``Enter`` moves a value into a child frame (attrs ``frame_name``, ``is_constant``,
  ``parallel_iterations``), ``Exit`` back to the parent, ``NextIteration`` to the next
  iteration. ``LoopCond`` marks a loop's predicate (the pivot). ``Ref*`` variants carry
  variable references.
- Builders work through *control flow contexts*. While a branch or loop body is built, its
  context is pushed on the graph (``graph.push_scopes(control_flow_context=ctx)``) and
  ``Graph.create_op`` hands every new op to ``ctx.add_op``. The context rewrites inputs that
  come from outside (``add_value``): a cond branch inserts a ``Switch`` on the branch's
  predicate (so the op is dead when the branch is not taken), a loop inserts a constant
  ``Enter`` (a loop invariant, visible to every iteration). Ops without inputs in the context
  get a control edge from the pivot, so they run in every iteration (or only in the taken
  branch) instead of once in the root frame. Contexts nest: an outer value reaching an inner
  loop inside a cond branch goes through the cond's Switch first, then the loop's Enter.
- Structure ops the builders create themselves (Enter, Merge, Exit, NextIteration, LoopCond)
  are left alone by ``add_op``.
- ``while_loop`` builds on this module (``while_loop.py``, ``while_frame.py``), and so do the
  gradients of the primitives (``control_flow_grad.py``, ``while_grad.py``); this module
  imports none of them, and ``asyncflow/ops/__init__.py`` imports all.

Nothing here knows about the executor; frames exist only at run time.
"""
from __future__ import annotations

import collections.abc
import contextlib

from asyncflow import dtypes
from asyncflow.graph import register_op
from asyncflow.graph.graph import Operation, Tensor
from asyncflow.graph.shape import TensorShape
from asyncflow.ops.array import identity
from asyncflow.ops.construct import as_tensor, make, make_op
from asyncflow.ops.logging_ops import Assert
from asyncflow.ops.control_flow_structure import (  # noqa: F401 (cf.flatten etc. are used)
    is_namedtuple, same_structure, composite_invariants, flatten, pack_as, register_composite)
from asyncflow.ops.sources import constant

STRUCTURE_TYPES = frozenset({"Enter", "RefEnter", "Exit", "RefExit", "Merge", "NextIteration",
                             "RefNextIteration", "LoopCond"})


# -- primitives -------------------------------------------------------------------------
def _infer_switch(op):
    data, pred = op.inputs
    if not pred.dtype.is_bool:
        raise TypeError(f"the predicate must be bool, got {pred.dtype.name}")
    if pred.shape.ndims not in (None, 0):
        raise ValueError(f"the predicate must be a scalar, got shape {pred.shape}")
    return [(data.dtype, data.shape), (data.dtype, data.shape)]


def _merged_shape(shapes):
    first = shapes[0]
    if all(s == first for s in shapes) and first.dims is not None:
        return first
    ranks = {s.ndims for s in shapes}
    if None in ranks or len(ranks) != 1:
        return TensorShape(None)
    dims = []
    for column in zip(*(s.dims for s in shapes)):
        dims.append(column[0] if all(d == column[0] for d in column) else None)
    return TensorShape(dims)


def _infer_merge(op):
    inputs = op.inputs
    if not inputs:
        raise ValueError("Merge needs at least one input")
    dtype = inputs[0].dtype
    for tensor in inputs[1:]:
        if tensor.dtype is not dtype:
            raise TypeError(f"all inputs must have one dtype, got {dtype.name} and "
                            f"{tensor.dtype.name}")
    return [(dtype, _merged_shape([t.shape for t in inputs])), (dtypes.int32, TensorShape([]))]


def _infer_same(op):
    return [(op.inputs[0].dtype, op.inputs[0].shape)]


def _infer_loop_cond(op):
    pred = op.inputs[0]
    if not pred.dtype.is_bool or pred.shape.ndims not in (None, 0):
        raise TypeError(f"the loop condition must be a scalar bool, got {pred.dtype.name} "
                        f"with shape {pred.shape}")
    return [(dtypes.bool, TensorShape([]))]


register_op("Switch", infer=_infer_switch, control_flow=True)
register_op("RefSwitch", infer=_infer_switch, control_flow=True, ref_inputs=(0,),
            ref_outputs=(0, 1))
register_op("Merge", infer=_infer_merge, control_flow=True)
for _type, _ref in (("Enter", False), ("Exit", False), ("NextIteration", False),
                    ("RefEnter", True), ("RefExit", True), ("RefNextIteration", True)):
    register_op(_type, infer=_infer_same, control_flow=True,
                ref_inputs=(0,) if _ref else (), ref_outputs=(0,) if _ref else ())
register_op("LoopCond", infer=_infer_loop_cond, control_flow=True)


def _infer_stack(op):
    return [(dtypes.string, TensorShape([]))]


def _infer_push(op):
    return [(op.inputs[1].dtype, op.inputs[1].shape)]


def _infer_pop(op):
    return [(op.get_attr("elem_type"), TensorShape(None))]


register_op("StackV2", infer=_infer_stack, stateful=True)
register_op("StackPushV2", infer=_infer_push, stateful=True)
register_op("StackPopV2", infer=_infer_pop, stateful=True)


def switch(data, pred, name=None):
    """``(output_false, output_true)``: ``data`` on the output ``pred`` selects; the other is dead.

    Raises:
        TypeError: if ``pred`` is not bool.
    """
    data = data if isinstance(data, Tensor) and data.is_ref else as_tensor(data)
    op_type = "RefSwitch" if data.is_ref else "Switch"
    op = make_op(op_type, (data, as_tensor(pred)), None, name, "Switch")
    return op.outputs[0], op.outputs[1]


def merge(inputs, name=None):
    """``(output, value_index)``: the first live input and its index.

    Raises:
        TypeError: if the inputs' dtypes differ.
    """
    inputs = [as_tensor(t) for t in inputs]
    op = make_op("Merge", inputs, None, name, "Merge")
    return op.outputs[0], op.outputs[1]


def enter_frame(data, frame_name, is_constant=False, parallel_iterations=10, name=None):
    op_type = "RefEnter" if data.is_ref else "Enter"
    return make(op_type, (data,), {"frame_name": frame_name, "is_constant": bool(is_constant),
                                   "parallel_iterations": int(parallel_iterations)},
                name, "Enter")


def exit_frame(data, name=None):
    return make("RefExit" if data.is_ref else "Exit", (data,), None, name, "Exit")


def next_iteration(data, name=None):
    return make("RefNextIteration" if data.is_ref else "NextIteration", (data,), None, name,
                "NextIteration")


def loop_cond(pred, name=None):
    """The pivot of a loop: ``pred`` marked as the predicate every loop Switch uses."""
    return make("LoopCond", (as_tensor(pred),), None, name, "LoopCond")


# -- contexts ---------------------------------------------------------------------------
def inside(ctx, ancestor):
    """Whether context ``ctx`` is ``ancestor`` or nested in it."""
    while ctx is not None:
        if ctx is ancestor:
            return True
        ctx = ctx.outer
    return False


class _Context:
    """Common part of cond and loop contexts: value caching and op rewriting."""

    def __init__(self, graph, outer):
        self.graph = graph
        self.outer = outer
        self._values = {}
        self._imported = set()  # tensors this context made (Switch/Enter outputs)
        self._consumer = None   # the op add_op is rewiring

    def is_internal(self, tensor):
        return tensor in self._imported or inside(tensor.op.control_flow_context, self)

    def imported_values(self):
        """The outer tensors used inside, as seen inside (their Switch/Enter outputs)."""
        return tuple(self._values.values())

    def add_value(self, tensor):
        """``tensor`` as seen from inside this context (through Switch/Enter if external)."""
        if self.is_internal(tensor):
            return tensor
        found = self._values.get(tensor)
        if found is None:
            source = tensor.op.control_flow_context
            if source is not None and self._consumer is not None and self._checks_escapes():
                source.check_use(tensor, self._consumer, self)  # before any import op
            outer_value = self.outer.add_value(tensor) if self.outer is not None else tensor
            with self.graph.push_scopes(control_flow_context=self.outer), \
                    self.graph.control_dependencies(None):
                found = self._import(outer_value)
            self._values[tensor] = found
            self._imported.add(found)
        return found

    # A gradient loop reads forward loop values legitimately (they arrive through stacks).
    reads_forward_values = False

    def _checks_escapes(self):
        ctx = self
        while ctx is not None:
            if ctx.reads_forward_values:
                return False
            ctx = ctx.outer
        return True

    @contextlib.contextmanager
    def entered(self):
        with self.graph.push_scopes(control_flow_context=self):
            yield self

    def add_op(self, op):
        """Called by ``Graph.create_op`` for each op created in this context."""
        if op.type in STRUCTURE_TYPES:
            return
        self._consumer = op  # named by check_use if an input may not be imported
        try:
            for index, tensor in enumerate(op.inputs):
                real = self.add_value(tensor)
                if real is not tensor:
                    op.update_input(index, real)
        finally:
            self._consumer = None
        self._fix_control_inputs(op)
        if self._needs_pivot(op):
            op.add_control_input(self.control_pivot())

    def _fix_control_inputs(self, op):
        """Control edges from outside a loop would cross frames: route them through Enters."""

    def check_use(self, tensor, consumer, consumer_ctx):
        """Raise ValueError when ``consumer`` (in ``consumer_ctx``) reads ``tensor`` (made in
        this context) from outside a while loop that ``tensor`` is computed in (TF1's
        ``CheckInputFromValidContext``): only the loop's Exits may leave it."""
        ctx = self.outer if tensor.op.type in ("Exit", "RefExit") else self
        while ctx is not None and not isinstance(ctx, WhileContext):
            ctx = ctx.outer
        if ctx is not None and not inside(consumer_ctx, ctx):
            other = consumer_ctx
            while other is not None and not isinstance(other, WhileContext):
                other = other.outer
            why = ("they are in different while loops" if other is not None
                   else f"'{tensor.op.name}' is in a while loop")
            raise ValueError(
                f"Cannot use '{tensor.op.name}' as input to '{consumer.name}' because {why}. "
                f"Return it from the body of while_loop '{ctx.frame_name}' (a loop variable) "
                "to use its final value.")

    def _needs_pivot(self, op):
        return not op.inputs and not any(
            inside(c.control_flow_context, self) for c in op.control_inputs)


class CondContext(_Context):
    """One branch of a ``cond``: external values pass a Switch on the branch predicate."""

    def __init__(self, graph, outer, pred, pivot, branch):
        super().__init__(graph, outer)
        self.pred = pred
        self.pivot = pivot
        self.branch = branch
        self.sibling = None  # the other branch's context (set by cond)

    def _import(self, tensor):
        imported = switch(tensor, self.pred)[self.branch]
        # The loop gradient saves such a value only when this branch is taken.
        cond_imports(self.graph)[imported.op] = self
        _cond_internals(self.graph)[imported.op] = self
        return imported

    def control_pivot(self):
        return self.pivot.op


class WhileContext(_Context):
    """A loop's frame: external values enter as loop invariants (constant Enters)."""

    def __init__(self, graph, outer, frame_name, parallel_iterations, back_prop):
        super().__init__(graph, outer)
        self.frame_name = frame_name
        self.parallel_iterations = parallel_iterations
        self.back_prop = back_prop
        self.pivot = None            # the LoopCond output
        self.pivot_for_pred = None   # the first Merge op
        self.pivot_for_body = None   # the first body Identity op
        self.loop_enters = []        # non-constant Enter outputs, per loop var
        self.loop_exits = []         # Exit outputs, per loop var
        self.loop_merges = []        # Merge outputs, per loop var
        self.body_vars = []          # the body's inputs (Identity of Switch:1), per loop var
        self.grad_state = None       # set by gradients (the forward loop's counter and stacks)

    def _import(self, tensor):
        return enter_frame(tensor, self.frame_name, is_constant=True,
                      parallel_iterations=self.parallel_iterations)

    def is_internal(self, tensor):
        op = tensor.op
        if op.type in ("Enter", "RefEnter") and op.attrs.get("frame_name") == self.frame_name:
            return True  # Enter outputs live in this loop's frame
        return super().is_internal(tensor)

    def control_pivot(self):
        return self.pivot_for_body or self.pivot_for_pred

    def is_invariant(self, tensor):
        op = tensor.op
        return (op.type in ("Enter", "RefEnter") and op.attrs.get("is_constant")
                and op.attrs.get("frame_name") == self.frame_name)

    def _needs_pivot(self, op):
        if any(inside(c.control_flow_context, self) for c in op.control_inputs):
            return False
        return all(self.is_invariant(t) for t in op.inputs)

    def settle_variable_reads(self):
        """Read once at loop entry each variable the loop only reads.

        A read in the body is built as a fresh read of the reference (so it would see an
        assignment made in the loop). Once the loop is built, a variable that no op of the
        loop assigns (its RefEnter feeds only reads made directly in this context) is read
        once, when the loop's Enters run (after the same control dependencies), and enters
        as a loop invariant: what TF1's aliased reads would see, and the body stays plain
        enough for the straight-line loop path. Top-level loops only.
        """
        if self.outer is not None or self.reads_forward_values:
            return
        for ref, entered in list(self._values.items()):
            if entered.op.type != "RefEnter":
                continue
            reads = [op for op in entered.consumers()]
            if not reads or any(op.type != "Identity" or op.control_flow_context is not self
                                for op in reads):
                continue  # assigned, read in a cond, or in a nested loop: stays a fresh read
            graph = self.graph
            with graph.push_scopes(control_flow_context=None), \
                    graph.control_dependencies(self.loop_enters[0].op.control_inputs), \
                    graph.colocate_with(ref.op):
                value = identity(ref, name="read")
            del self._values[ref]
            self._imported.discard(entered)
            invariant = self.add_value(value)
            for op in reads:
                op.update_input(0, invariant)

    def _fix_control_inputs(self, op):
        external = [c for c in op.control_inputs
                    if not inside(c.control_flow_context, self)
                    and not (c.type in ("Enter", "RefEnter")
                             and c.attrs.get("frame_name") == self.frame_name)]
        for control in external:
            op.remove_control_input(control)
            with self.graph.push_scopes(control_flow_context=control.control_flow_context), \
                    self.graph.control_dependencies([control]):
                token = constant(0, name="control_token")
            op.add_control_input(self.add_value(token).op)


def is_loop_back_edge(op, index):
    """Whether input ``index`` of ``op`` is a loop's back edge (NextIteration -> Merge)."""
    return op.type == "Merge" and op.inputs[index].op.type in ("NextIteration",
                                                               "RefNextIteration")


def _loop_around(ctx):
    """The innermost while loop context at or around ``ctx``, or None."""
    while ctx is not None and not isinstance(ctx, WhileContext):
        ctx = ctx.outer
    return ctx


def _where(ctx):
    loop = _loop_around(ctx)
    return f"while_loop '{loop.frame_name}'" if loop is not None else "a cond"


def check_fetchable(op):
    """Raise TF1's ValueError when ``op`` (a fetch's op, or a target) may not be fetched.

    TF1 marks every op built inside a cond branch or a while loop as not fetchable, except
    a loop's Enters and the Exits of a top-level loop (a cond's Merge lies outside its
    branches): a value inside a loop exists once per iteration, and only while it runs.
    """
    ctx = op.control_flow_context
    if ctx is None:  # the common case: one dict lookup at most
        internals = op.graph.extensions.get("cond_internals")
        if internals is None or op not in internals:
            return
        ctx = internals[op]
    elif op.type in ("Enter", "RefEnter") or \
            (op.type in ("Exit", "RefExit") and ctx.outer is None):
        return
    raise ValueError(f"Operation '{op.name}' has been marked as not fetchable: it is computed "
                     f"inside {_where(ctx)}. Fetch a result of the loop or cond (return the "
                     "value from its body or branch) instead.")


def check_feedable(tensor):
    """Raise TF1's ValueError when ``tensor`` may not be fed: a loop's Enter, or any value
    computed inside a while loop but the Exits of a top-level loop (cond branch values
    outside loops may be fed, as in TF1)."""
    op = tensor.op
    ctx = op.control_flow_context
    if op.type in ("Enter", "RefEnter"):
        where = f"an Enter of while_loop '{op.attrs.get('frame_name')}'"
    elif ctx is None or (op.type in ("Exit", "RefExit") and ctx.outer is None) \
            or _loop_around(ctx) is None:
        return
    else:
        where = f"computed inside {_where(ctx)}"
    raise ValueError(f"Tensor '{tensor.name}' may not be fed: it is {where}. Feed a tensor "
                     "the loop reads (its initial values or a placeholder) instead.")


def current_context(graph):
    return graph.current_scopes().control_flow_context


# -- cond and case ------------------------------------------------------------------------
def _branch_output(ctx, value, fn_name, cond_name):
    if isinstance(value, Operation):
        with ctx.entered(), ctx.graph.control_dependencies([value]):
            return identity(ctx.pivot, name="op_output")
    if value is None:
        raise ValueError(f"cond '{cond_name}': {fn_name} returned None inside a structure; "
                         "every output must be a tensor or an op")
    with ctx.entered():
        return ctx.add_value(as_tensor(value))


def _build_branch(ctx, fn, fn_name, cond_name):
    with ctx.entered():
        result = fn()
    if result is None:
        raise ValueError(f"cond '{cond_name}': {fn_name} must return a value (a tensor, an op "
                         "or a nested structure of them), got None")
    leaves = flatten(result)
    return result, [_branch_output(ctx, leaf, fn_name, cond_name) for leaf in leaves], \
        [isinstance(leaf, Operation) for leaf in leaves]


def _check_pred(pred, what):
    if isinstance(pred, (bool, int)) or pred is None:
        raise TypeError(f"{what}: pred must not be a Python {type(pred).__name__}; pass a "
                        "boolean Tensor (TF1 semantics; use a Python if instead)")
    pred = as_tensor(pred)
    if not pred.dtype.is_bool:
        raise TypeError(f"{what}: pred must be a bool tensor, got {pred.dtype.name}")
    if pred.shape.ndims not in (None, 0):
        raise ValueError(f"{what}: pred must be a scalar, got shape {pred.shape}")
    return pred


def cond(pred, true_fn=None, false_fn=None, strict=False, name=None, fn1=None, fn2=None):
    """``true_fn()`` if ``pred`` else ``false_fn()``; only the taken branch's ops run.

    Args:
        pred: a scalar bool Tensor (a Python bool is a TypeError, as in TF1).
        true_fn, false_fn: callables returning tensors, ops or nested structures of them
            (the same structure and dtypes from both).
        strict: keep a one-element list or tuple as such (TF1's ``strict=True``).
        name: name scope of the cond's ops.
        fn1, fn2: TF1's deprecated names of ``true_fn`` and ``false_fn``.

    Returns:
        The merged outputs, in ``true_fn``'s structure; unless ``strict``, a one-element
        list or tuple comes back as its element (TF1). An op a branch returns comes back as
        a bool tensor that runs the op and evaluates to the branch's pivot (True in the true
        branch), as TF1's ``with_dependencies([op], pivot)``.

    Raises:
        TypeError: for a non-tensor or non-bool pred, missing, duplicate or non-callable
            branch functions.
        ValueError: for mismatched structures or dtypes (TF1's classes).
    """
    if fn1 is not None:
        if true_fn is not None:
            raise TypeError("cond(): true_fn and fn1 may not be set simultaneously.")
        true_fn = fn1
    if fn2 is not None:
        if false_fn is not None:
            raise TypeError("cond(): false_fn and fn2 may not be set simultaneously.")
        false_fn = fn2
    if not callable(true_fn):
        raise TypeError("true_fn must be callable.")
    if not callable(false_fn):
        raise TypeError("false_fn must be callable.")
    pred = _check_pred(pred, f"cond '{name or 'cond'}'")
    graph = pred.graph
    with graph.name_scope(name or "cond") as scope:
        cond_name = scope.rstrip("/")
        switch_f, switch_t = switch(pred, pred)
        pivot_t = identity(switch_t, name="switch_t")
        pivot_f = identity(switch_f, name="switch_f")
        pred_id = identity(pred, name="pred_id")
        _cond_internals(graph).update(dict.fromkeys((switch_t.op, pivot_t.op, pivot_f.op,
                                                     pred_id.op)))
        outer = current_context(graph)
        ctx_t = CondContext(graph, outer, pred_id, pivot_t, 1)
        ctx_f = CondContext(graph, outer, pred_id, pivot_f, 0)
        ctx_t.sibling, ctx_f.sibling = ctx_f, ctx_t
        res_t, out_t, _ = _build_branch(ctx_t, true_fn, "true_fn", cond_name)
        res_f, out_f, _ = _build_branch(ctx_f, false_fn, "false_fn", cond_name)
        if not same_structure(res_t, res_f) or len(out_t) != len(out_f):
            raise ValueError(f"cond '{cond_name}': true_fn and false_fn must return the same "
                             f"structure, got {res_t!r} and {res_f!r}")
        merged = []
        for t, f in zip(out_t, out_f):
            if t.dtype is not f.dtype:  # TF1: a ValueError
                raise ValueError(f"cond '{cond_name}': outputs of true_fn and false_fn must "
                                f"have the same type: {t.dtype.name}, {f.dtype.name}")
            out, _ = merge([f, t], name="Merge")
            cond_merges(graph)[out.op] = pred_id
            merged.append(out)
    if composite_invariants(res_t) is not None:
        return pack_as(res_t, merged)
    if not isinstance(res_t, (list, tuple, collections.abc.Mapping)):
        return merged[0]
    if not strict and isinstance(res_t, (list, tuple)) and len(res_t) == 1:
        return pack_as(res_t, merged)[0]  # TF1 (strict=False) unpacks a singleton
    return pack_as(res_t, merged)


def cond_imports(graph):
    """``{Switch op: CondContext}`` of the Switches that bring outer values into a branch."""
    return graph.extensions.setdefault("cond_imports", {})


def _cond_internals(graph):
    """``{op: CondContext or None}`` of the ops a cond builds around its branches, outside
    them (its predicate's Switch and pivots, the Switches importing values), which TF1
    counts as inside the cond (not fetchable)."""
    return graph.extensions.setdefault("cond_internals", {})


def cond_merges(graph):
    """``{merge op: predicate}`` of every cond in ``graph`` (for the Merge gradient)."""
    return graph.extensions.setdefault("cond_merges", {})


def case(pred_fn_pairs, default=None, exclusive=False, name="case"):
    """The fn of the first true predicate (TF1 ``tf.case``), else ``default``.

    Args:
        pred_fn_pairs: a list of ``(pred, fn)`` pairs or a dict ``{pred: fn}``; a dict (not
            an OrderedDict) is tried in the order of its predicates' names, as TF1 does.
        default: the callable used when no predicate holds. When None, the last pair's fn
            is the default, run under an Assert that its predicate holds (TF1): no true
            predicate fails the run with InvalidArgumentError, where the ops that fn builds
            run (TF1's control dependency: a tensor it returns unchanged does not wait).
        exclusive: when True, more than one true predicate fails the run (without a
            default, TF1 checks all but the last, which stands in for the default).
        name: name scope.

    Returns:
        The chosen fn's outputs.

    Raises:
        TypeError: for malformed pairs. ValueError: for no pairs (TF1).
    """
    if isinstance(pred_fn_pairs, collections.abc.Mapping):
        pairs = list(pred_fn_pairs.items())
        if not isinstance(pred_fn_pairs, collections.OrderedDict):
            pairs.sort(key=lambda pair: getattr(pair[0], "name", ""))
    else:
        pairs = list(pred_fn_pairs)
    if not pairs:  # TF1 fails on no pairs, a default or not
        raise ValueError(f"case '{name}': pred_fn_pairs is empty; give at least one (pred, fn)")
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2 or not callable(pair[1]):
            raise TypeError(f"case: each entry must be a (pred, callable) pair, got {pair!r}")
    preds = [_check_pred(p, f"case '{name}'") for p, _ in pairs]
    fns = [fn for _, fn in pairs]
    graph = preds[0].graph
    with graph.name_scope(name):
        if default is None:
            default = _asserted_default(graph, preds.pop(), fns.pop(), name)
        if exclusive and len(preds) > 1:
            check = make_op("CaseExclusive", preds, None, None, "exclusive")
            with graph.control_dependencies([check]):
                preds = [identity(p) for p in preds]

        def chain(index):
            if index == len(preds):
                return default()
            # TF1's names: "case/cond/Merge", a later pair's cond inside the earlier's false
            # branch ("case/cond/cond/Merge").
            return cond(preds[index], fns[index], lambda: chain(index + 1), name="cond")
        return chain(0)


def _asserted_default(graph, pred, fn, name):
    """TF1's stand-in default: the last pair's ``fn``, its ops after an Assert on its
    predicate (so no true predicate is an error, not the last fn's value)."""
    def default():
        check = Assert(pred, [f"case '{name}': none of the predicates is true and there is "
                              "no default (pass default= to tf.case)"])
        with graph.control_dependencies([check]):
            return fn()
    return default


def _infer_case_exclusive(op):
    for tensor in op.inputs:
        if not tensor.dtype.is_bool:
            raise TypeError(f"predicates must be bool, got {tensor.dtype.name}")
    return []


register_op("CaseExclusive", infer=_infer_case_exclusive)
