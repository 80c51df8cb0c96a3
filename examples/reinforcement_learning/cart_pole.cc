#include "examples/reinforcement_learning/cart_pole.h"

#include <cmath>

namespace tessera::examples {
namespace {

constexpr double kGravity = 9.8, kCartMass = 1.0, kPoleMass = 0.1, kHalfLength = 0.5;
constexpr double kForce = 10.0, kTau = 0.02;  // seconds per step
constexpr double kMaxAngle = 12 * 2 * M_PI / 360, kMaxPosition = 2.4;

}  // namespace

std::array<float, 4> CartPole::Reset() {
  std::uniform_real_distribution<float> small(-0.05f, 0.05f);
  for (float& value : state_) value = small(rng_);
  steps_ = 0;
  return state_;
}

bool CartPole::Step(int action) {
  const double x = state_[0], x_dot = state_[1], theta = state_[2], theta_dot = state_[3];
  const double force = action == 1 ? kForce : -kForce;
  const double cos = std::cos(theta), sin = std::sin(theta);
  const double total_mass = kCartMass + kPoleMass, pole_moment = kPoleMass * kHalfLength;
  const double temp = (force + pole_moment * theta_dot * theta_dot * sin) / total_mass;
  const double theta_acc = (kGravity * sin - cos * temp) /
                           (kHalfLength * (4.0 / 3.0 - kPoleMass * cos * cos / total_mass));
  const double x_acc = temp - pole_moment * theta_acc * cos / total_mass;
  // Euler integration, as Gym's default.
  state_ = {static_cast<float>(x + kTau * x_dot), static_cast<float>(x_dot + kTau * x_acc),
            static_cast<float>(theta + kTau * theta_dot),
            static_cast<float>(theta_dot + kTau * theta_acc)};
  ++steps_;
  return std::abs(state_[0]) > kMaxPosition || std::abs(state_[2]) > kMaxAngle ||
         steps_ >= max_steps_;
}

}  // namespace tessera::examples
