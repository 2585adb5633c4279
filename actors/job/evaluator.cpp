#include "actors/job/evaluator.hpp"

namespace troupe {

evaluator_actor::behavior_type evaluator(evaluator_actor::pointer,
                                         std::shared_ptr<const training_task> task) {
  const bool sparse = !task->sparse_tables().empty();
  return {
      [task, sparse](eval_atom, const std::shared_ptr<const eval_input>& in) {
        eval_output out;
        out.result = sparse ? task->evaluate(in->params, in->rows) : task->evaluate(in->params);
        if (in->figures) out.figures = task->report_figures(in->params, in->rows);
        return out;
      },
  };
}

}  // namespace troupe
