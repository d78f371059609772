"""Plain-Python Sokoban rules (gym-sokoban's push/reward semantics), written from the rules,
as the independent reference for agent_rl.envs.sokoban."""

DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
GLYPH = {"wall": "#", "floor": "_", "target": "O", "box_on": "√", "box": "X", "player": "P", "player_on": "S"}


class PySokoban:
  def __init__(self, walls, targets, boxes, player, max_steps=100):
    self.h, self.w = len(walls), len(walls[0])
    self.walls = {(r, c) for r in range(self.h) for c in range(self.w) if walls[r][c]}
    self.targets = {(r, c) for r in range(self.h) for c in range(self.w) if targets[r][c]}
    self.boxes = {(r, c) for r in range(self.h) for c in range(self.w) if boxes[r][c]}
    self.player = tuple(player)
    self.steps, self.max_steps, self.done = 0, max_steps, False

  def blocked(self, p):
    return p in self.walls or not (0 <= p[0] < self.h and 0 <= p[1] < self.w)

  def solved(self):
    return self.targets <= self.boxes

  def move(self, name):
    """One push move; returns gym-sokoban's reward (-0.1 step, +-1 box on/off, +10 finish)."""
    dr, dc = DIRS[name]
    before = len(self.boxes & self.targets)
    p1 = (self.player[0] + dr, self.player[1] + dc)
    p2 = (p1[0] + dr, p1[1] + dc)
    if not self.blocked(p1):
      if p1 in self.boxes:
        if not self.blocked(p2) and p2 not in self.boxes:
          self.boxes = (self.boxes - {p1}) | {p2}
          self.player = p1
      else:
        self.player = p1
    self.steps += 1
    after = len(self.boxes & self.targets)
    reward = -0.1 + (after - before) + (10.0 if self.solved() else 0.0)
    self.done = self.solved() or self.steps >= self.max_steps
    return reward

  def turn(self, names, valid):
    """A text turn: invalid -> no move, one step, -0.1 format; else moves until solved."""
    if self.done:
      return 0.0
    if not valid:
      self.steps += 1
      self.done = self.steps >= self.max_steps
      return -0.1
    total = 0.0
    for n in names:
      total += self.move(n)
      if self.solved():
        break
    self.done = self.solved() or self.steps >= self.max_steps
    return total

  def render(self):
    rows = []
    for r in range(self.h):
      row = ""
      for c in range(self.w):
        p = (r, c)
        if p in self.walls:
          row += "#"
        elif p == self.player:
          row += "S" if p in self.targets else "P"
        elif p in self.boxes:
          row += "√" if p in self.targets else "X"
        else:
          row += "O" if p in self.targets else "_"
      rows.append(row + "\n")
    return "".join(rows)
