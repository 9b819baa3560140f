#include "tools/train/builtin_corpus.h"

namespace chunkzero {

// Original text, written for this file; any prose would do. It is long
// enough that a small model cannot memorise it in a hundred steps, and
// regular enough (English spelling, repeated words) that the loss falls
// visibly within them.
absl::string_view BuiltinCorpus() {
  static constexpr char kText[] = R"(On Sharing the Load

When a model grows larger than the memory of one machine, the people who
train it face a choice. They can buy a bigger machine, if one exists, or
they can teach many small machines to carry the model together. The second
way is cheaper and it scales, but it asks for care. Every machine must know
which part of the model it keeps, when it must borrow the other parts, and
when it may give them back.

The simplest plan keeps a full copy of the model on every machine. Each
machine reads its own slice of the data, computes the gradients of its own
examples, and then all the machines add their gradients together so that
every copy takes the same step. This plan is easy to reason about. Its cost
is memory: every machine holds the weights, the gradients, and the state of
the optimizer, which for the Adam method is two more numbers for every
weight. With mixed precision the weights are kept twice, once in half
precision for the arithmetic and once in full precision for the updates, so
a model with a billion weights needs sixteen billion bytes on every machine
before it has seen a single example.

A better plan notices that most of those bytes are needed only now and
then. The optimizer state is needed once per step, at the very end. The
full precision weights are needed at the same moment. Even the half
precision weights are needed by one layer at a time. So the machines can
split the model into pieces and let each machine keep only its share of
every piece. When a layer is about to run, the machines gather its pieces,
run the layer, and drop the borrowed parts again. When the gradients of a
piece are ready, the machines add them together and each keeps only the
sum for its own share. At the end of the step each machine updates only
the weights it keeps.

The pieces are called chunks. A chunk is a flat buffer that holds several
tensors one after another, in the order in which the model first uses
them. Packing tensors into chunks has two benefits. The machines talk in
large messages instead of many small ones, which keeps the network busy and
the overhead low. And because the order of the chunks follows the order of
the computation, a machine can fetch the next chunk while the current layer
is still running, so that the waiting hides behind the work.

There are rules that keep this safe. A tensor is never split across two
chunks. Every machine must ask for the same chunks in the same order, or
one of them will wait forever for a partner who never comes. A chunk may be
dropped only when no layer is using it, and its gradients may be added only
when every tensor in it has received its gradient. Each tensor carries a
small state that says which of these moments it has reached, and any move
that breaks the rules is an error with a clear message rather than a
silent mistake.

Gradients need a word of their own. A half precision gradient has the same
shape as the half precision weight it belongs to, and once the backward
pass has used a weight for the last time, the weight is no longer needed
until the optimizer writes the new value. So the gradient can be written
into the very memory that held the weight. This saves two bytes for every
weight, but it has a consequence: if the model wants to add up gradients
over several small batches before it takes a step, the weights must be put
back after each small batch, and the running sum must live somewhere else.

Half precision numbers have a narrow range. Small gradients can vanish to
zero and large ones can overflow to infinity. The usual remedy multiplies
the loss by a large factor before the backward pass and divides the
gradients by the same factor before the update. If any gradient on any
machine overflows, every machine must agree to skip the step, restore its
weights from the full precision copy, and try again with a smaller factor.
If many steps pass without trouble, the factor grows again.

Machines can also lend their work to the processor next to them. The
optimizer state and the full precision weights can live in the main memory
of the computer while the half precision chunks live on the accelerator.
The update then runs on the ordinary processor, one chunk at a time, with
fast loops that read each number once and write it once. Moving chunks
between the two memories is allowed at the boundary between steps, and
every view of a tensor must follow its chunk wherever it goes.

None of this changes the mathematics. A model trained on four machines in
this way should take the same steps as the same model trained on one
machine with four times the batch, up to the rounding of the numbers. That
is the test that matters most, and it is the first one to run whenever
anything changes.
)";
  return absl::string_view(kText, sizeof(kText) - 1);
}

}  // namespace chunkzero
