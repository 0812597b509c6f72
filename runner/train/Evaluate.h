// Purpose: one evaluation of the run's model on the test split — what the epoch's end, the
// evaluations inside epochs (Evaluations.h) and methods comparing models (Context) call.
#pragma once

#include "runner/api/Method.h"
#include "runner/train/Setup.h"

namespace exprun {

// Evaluation on the test split, sharded over the ranks (counts summed): loss, Top-1, Top-5 (%),
// in the run's precision (an autocast region of its own).
// `forward`: another function of the same model (an int8 conversion of it); default: the training
// forward (Learner::forward, else the model's).
EvalResult evaluate(TrainSetup& s, Dist& dist, const Forward& forward = {});

}  // namespace exprun
