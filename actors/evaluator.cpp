#include "actors/evaluator.hpp"

namespace troupe {

evaluator_actor::behavior_type evaluator(evaluator_actor::pointer,
                                         std::shared_ptr<const training_task> task) {
  return {
      [task](eval_atom, const std::vector<float>& params) -> std::tuple<double, double> {
        const evaluation result = task->evaluate(params);
        return {result.accuracy, result.loss};
      },
  };
}

}  // namespace troupe
