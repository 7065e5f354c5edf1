"""How conversations go in the car-rental world (contract: `envs/conversation.py`).

Every hook is optional; this world keeps the defaults (the customer identifies with their
customer id; writes are announced plainly with their amounts) and declares only which ids a
customer knows and may say: their customer id, their rental numbers, and a car's fleet
number, which is painted on the car and listed on the booking page. Every other id of the
world would be internal and must never appear in a task's instruction.
"""

USER_FACING_IDS = ["customer_id", "rental_id", "car_id"]
